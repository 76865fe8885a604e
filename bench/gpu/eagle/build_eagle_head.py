# (a GPU-host script: it prints its result as one JSON line)
"""Build an EAGLE3 or EAGLE head for the testbed target from the target's own first K layers.

usage: python3 build_eagle_head.py TARGET_DIR OUT_DIR [--kind eagle3|eagle] [--k 2]
                                   [--exact] [--delta-log2 16] [--device cuda|cpu]

TARGET_DIR is a build_pair.py target (config.json, *.safetensors, tokenizer files). The head
computes the target's first K layers on the sequence shifted by one, which is what an
EAGLE-family draft sees in SGLang (position i reads token i+1 and the target's state at i),
so it drafts what the STANDALONE draft drafts.

--kind eagle3: LlamaForCausalLMEagle3 with fc = 0 (the target's aux states are ignored),
  layer 0 = the target's layer 0 reading only the input_layernorm(embeds) half, the final
  norm scaled by 2^-DELTA_LOG2 and the LM head by 2^DELTA_LOG2 with norm_output = true (same
  logits; the state fed back at draft steps 2-3 is almost zero). --exact prepends a layer
  that copies the normalised embedding into the residual (32 KV heads, target layers GQA-expanded).
--kind eagle: LlamaForCausalLMEagle with fc = [I, 0]; layer 0's missing input norm folded into
  its q/k/v, or with --exact a pass-through layer 0 in front.

README.md explains the construction. Writes config.json, model.safetensors and the tokenizer
files copied from TARGET_DIR, and prints one JSON line.
"""

import argparse
import glob
import json
import os
import shutil
import time
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
)
COPY_GAIN = 2.0  # q = k = COPY_GAIN * normed embedding slice: self score ~ 4*sqrt(head_dim)
DROP_KEYS = ("_name_or_path", "auto_map", "architectures", "transformers_version")


def load_target(target_dir: str, k: int, device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The target's config and the tensors a head needs (embedding, norm, LM head, layers < k)."""
    with open(os.path.join(target_dir, "config.json")) as f:
        cfg = json.load(f)
    want: tuple[str, ...] = ("model.embed_tokens.", "model.norm.", "lm_head.")
    want += tuple(f"model.layers.{i}." for i in range(k))
    sd = {}
    files = sorted(glob.glob(os.path.join(target_dir, "*.safetensors")))
    if not files:
        raise SystemExit(f"no *.safetensors in {target_dir}")
    for path in files:
        with safe_open(path, framework="pt", device=device) as f:
            names = [n for n in f.keys() if n.startswith(want)]  # noqa: SIM118 (a safe_open handle)
            for name in names:
                sd[name] = f.get_tensor(name)
    if cfg.get("tie_word_embeddings") and "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return cfg, sd


def dims(cfg: dict[str, Any]) -> tuple[int, int, int, int]:
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    return h, nh, cfg.get("num_key_value_heads") or nh, cfg.get("head_dim") or h // nh


def target_layer(sd: dict[str, Any], i: int) -> dict[str, Any]:
    p = f"model.layers.{i}."
    return {n[len(p) :]: t for n, t in sd.items() if n.startswith(p)}


def repeat_kv(w: torch.Tensor, groups: int, head_dim: int) -> torch.Tensor:
    """k/v projection rows of each KV head repeated for the query heads that share it."""
    if groups == 1:
        return w
    return w.view(-1, head_dim, w.shape[1]).repeat_interleave(groups, dim=0).reshape(-1, w.shape[1])


def embed_rms(embed: torch.Tensor) -> torch.Tensor:
    return embed.float().pow(2).mean(dim=-1).sqrt()


def eagle3_aux_ids(n_layers: int) -> list[int]:
    """SGLang's default capture (the stream before layers 2, L/2, L-3) as eagle_config ids.

    SGLang captures the residual stream before layer id+1 for each id, and skips fc when the
    aux width equals the hidden size, so at least two distinct ids are needed.
    """
    ids = sorted({i for i in (1, n_layers // 2 - 1, n_layers - 4) if 0 <= i <= n_layers - 2})
    if len(ids) < 2:
        raise SystemExit("an EAGLE3 head needs a target with at least 3 layers")
    return ids


def make_eagle3(
    cfg: dict[str, Any], sd: dict[str, Any], k: int, copy_embed: bool, delta_log2: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """LlamaForCausalLMEagle3 head; copy_embed prepends the embedding-copy layer."""
    h, nh, nkv, hd = dims(cfg)
    dt = sd["model.embed_tokens.weight"].dtype
    dev = sd["model.embed_tokens.weight"].device
    n_target = cfg["num_hidden_layers"]
    groups = nh // nkv if copy_embed else 1

    def zeros(*s: int) -> Tensor:
        return torch.zeros(*s, dtype=dt, device=dev)

    def ones(n: int) -> Tensor:
        return torch.ones(n, dtype=dt, device=dev)

    out = {}
    layers = []
    if copy_embed:
        if nh * hd != h:
            raise SystemExit("--exact needs num_attention_heads * head_dim == hidden_size")
        eye = torch.eye(h, dtype=dt, device=dev)
        scale = embed_rms(sd["model.embed_tokens.weight"]).mean().item()
        inter = cfg["intermediate_size"]
        layers.append(
            {
                "input_layernorm.weight": ones(h),
                "hidden_norm.weight": ones(h),
                "post_attention_layernorm.weight": ones(h),
                "self_attn.q_proj.weight": torch.cat([COPY_GAIN * eye, zeros(h, h)], dim=1),
                "self_attn.k_proj.weight": torch.cat([COPY_GAIN * eye, zeros(h, h)], dim=1),
                "self_attn.v_proj.weight": torch.cat([eye, zeros(h, h)], dim=1),
                "self_attn.o_proj.weight": scale * eye,
                "mlp.gate_proj.weight": zeros(inter, h),
                "mlp.up_proj.weight": zeros(inter, h),
                "mlp.down_proj.weight": zeros(h, inter),
            }
        )
    for i in range(k):
        t = dict(target_layer(sd, i))
        t["hidden_norm.weight"] = t["input_layernorm.weight"]
        for n in ("k_proj", "v_proj"):
            t[f"self_attn.{n}.weight"] = repeat_kv(t[f"self_attn.{n}.weight"], groups, hd)
        layers.append(t)
    first = layers[0]
    if not copy_embed:  # the target's layer 0 reads only the embedding half of the 2h input
        for n in ("q_proj", "k_proj", "v_proj"):
            w = first[f"self_attn.{n}.weight"]
            first[f"self_attn.{n}.weight"] = torch.cat([w, torch.zeros_like(w)], dim=1)
    for i, layer in enumerate(layers):
        for n, t in layer.items():
            out[f"model.layers.{i}.{n}"] = t
    aux_ids = eagle3_aux_ids(n_target)
    out["model.fc.weight"] = zeros(h, h * len(aux_ids))
    out["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"]
    delta = 2.0**-delta_log2
    out["model.norm.weight"] = sd["model.norm.weight"] * delta
    out["lm_head.weight"] = sd["lm_head.weight"] / delta
    hcfg = {k_: v for k_, v in cfg.items() if k_ not in DROP_KEYS}
    hcfg.update(
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "num_hidden_layers": len(layers),
            "num_key_value_heads": nkv * groups,
            "head_dim": hd,
            "draft_vocab_size": cfg["vocab_size"],
            "target_hidden_size": h,
            "tie_word_embeddings": False,
            "norm_output": True,
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": aux_ids,
                "use_aux_hidden_state": True,
            },
        }
    )
    return hcfg, out


def make_eagle(
    cfg: dict[str, Any], sd: dict[str, Any], k: int, pass_layer: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """LlamaForCausalLMEagle head (names without "model.": its load_weights adds it)."""
    h, _, _, _ = dims(cfg)
    emb = sd["model.embed_tokens.weight"]
    dt, dev = emb.dtype, emb.device
    out = {"embed_tokens.weight": emb}
    out["fc.weight"] = torch.cat(
        [torch.eye(h, dtype=dt, device=dev), torch.zeros(h, h, dtype=dt, device=dev)], 1
    )
    out["fc.bias"] = torch.zeros(h, dtype=dt, device=dev)
    inv_s = 1.0 / embed_rms(emb).mean().item()
    shift = 1 if pass_layer else 0
    if pass_layer:  # layer 0 writes nothing: zero projections (it has no input_layernorm)
        for n, t in target_layer(sd, 0).items():
            if n != "input_layernorm.weight":
                out[f"layers.0.{n}"] = torch.zeros_like(t) if "proj" in n else torch.ones_like(t)
    w_in = target_layer(sd, 0)["input_layernorm.weight"].float()
    for i in range(k):
        for n, t in target_layer(sd, i).items():
            if i + shift == 0 and n == "input_layernorm.weight":
                continue  # SGLang's EAGLE layer 0 has none: folded into q/k/v below
            folded = i + shift == 0 and n.split(".")[-2] in ("q_proj", "k_proj", "v_proj")
            out[f"layers.{i + shift}.{n}"] = (t.float() * w_in * inv_s).to(dt) if folded else t
    hcfg = {k_: v for k_, v in cfg.items() if k_ not in DROP_KEYS}
    hcfg.update(
        {
            "architectures": ["LlamaForCausalLMEagle"],
            "model_type": "llama",
            "num_hidden_layers": k + shift,
            "tie_word_embeddings": False,
        }
    )
    return hcfg, out


def make_head(
    cfg: dict[str, Any],
    sd: dict[str, Any],
    kind: str,
    k: int,
    *,
    exact: bool = False,
    delta_log2: int = 16,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config dict, state dict) of the head; sd holds the target's tensors by checkpoint name."""
    if not 1 <= k <= cfg["num_hidden_layers"]:
        raise SystemExit(f"--k must be between 1 and {cfg['num_hidden_layers']}")
    if kind == "eagle3":
        return make_eagle3(cfg, sd, k, exact, delta_log2)
    return make_eagle(cfg, sd, k, exact)


def final_norm_is_constant(sd: dict[str, Any]) -> bool:
    w = sd["model.norm.weight"].float()
    return bool((w == w[0]).all() and w[0] > 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--kind", choices=("eagle3", "eagle"), default="eagle3")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument(
        "--exact",
        action="store_true",
        help="prepend the embedding-copy (eagle3) or pass-through (eagle) layer",
    )
    ap.add_argument("--delta-log2", type=int, default=16, help="eagle3: final norm scaled by 2^-N")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    t0 = time.time()
    cfg, sd = load_target(a.target_dir, a.k, a.device)
    hcfg, hsd = make_head(cfg, sd, a.kind, a.k, exact=a.exact, delta_log2=a.delta_log2)
    os.makedirs(a.out_dir, exist_ok=True)
    hsd = {n: t.contiguous().to("cpu") for n, t in hsd.items()}
    seen, uniq = {}, {}
    for n, t in hsd.items():  # safetensors refuses shared storage
        key = (t.data_ptr(), tuple(t.shape))
        uniq[n] = t.clone() if key in seen else t
        seen[key] = n
    save_file(uniq, os.path.join(a.out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(hcfg, f, indent=2)
    for name in TOKENIZER_FILES:
        src = os.path.join(a.target_dir, name)
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(a.out_dir, name))
    info = {
        "kind": a.kind,
        "architecture": hcfg["architectures"][0],
        "k": a.k,
        "layers": hcfg["num_hidden_layers"],
        "exact": a.exact,
        "params": sum(t.numel() for t in uniq.values()),
        "bytes": os.path.getsize(os.path.join(a.out_dir, "model.safetensors")),
        "final_norm_constant": final_norm_is_constant(sd),
        "build_s": round(time.time() - t0, 1),
    }
    if a.kind == "eagle" and not info["final_norm_constant"]:
        info["warning"] = "final norm weight not constant: the EAGLE head's argmax may differ"
    print(json.dumps(info))


if __name__ == "__main__":
    main()
