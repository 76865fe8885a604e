# (a GPU-host script: it prints its result as one JSON line)
"""Build a random DeepSeek-V3-shaped checkpoint whose own NextN/MTP layer tracks the target.

usage: python3 build_nextn_tracking.py OUT_DIR TOKENIZER_DIR [--eps 0.01] [--k 1]
           [--hidden 4096] [--layers 30] [--experts 8] [--seed 0] [--device cuda|cpu]

The checkpoint is a DeepseekV3ForCausalLM (MLA attention with DeepSeek-V3's head dims, MoE with
sigmoid noaux_tc routing, first layer dense, num_nextn_predict_layers 1) for SGLang's
`--speculative-algorithm NEXTN` with no draft path: the draft is the checkpoint's own NextN
layer (`model.layers.{L}.*`, L = --layers). Its greedy agreement with the target is tuned by
EPS, as in the Llama testbed pair (../testbed/build_pair.py):

  target  layers 0..K-1 as drawn; every layer from K on has its residual writes
          (self_attn.o_proj and every MLP down_proj: routed experts and shared experts)
          multiplied by EPS, so it costs full compute but moves the residual stream only a little.
  NextN   a copy of the target's layer 0 behind an input projection that passes only the next
          token's embedding, with the target's final norm and LM head:
          - decoder attention (MLA) and both layernorms: copied from layer 0;
          - decoder MLP: SGLang builds the NextN decoder layer as an MoE layer even though the
            target's layer 0 is dense, so the dense MLP is the shared expert
            (intermediate_size == moe_intermediate_size * n_shared_experts) and every routed
            expert's down_proj is zero: the routed sum is exactly 0 whatever the router picks;
          - eh_proj = [I, 0] over cat(enorm(embed), hnorm(hidden)): the target's hidden state
            is dropped; the embedding rows have unit RMS, so enorm (weight 1) returns them
            bit for bit in bf16 (checked below) and the decoder sees the raw embedding, as the
            target's layer 0 does;
          - shared_head.norm = model.norm, shared_head.head = lm_head, embed_tokens = the
            target's (SGLang's loader skips the last two and shares the target's tensors).
  At EPS = 0 the NextN layer computes exactly what the target computes, up to EAGLE's one-token
  shift (the draft never sees the first token) and rounding; agreement falls as EPS grows.

Shape (defaults, hidden 4096): 32 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128,
qk_rope 64, v_head 128; 8 routed experts of 1024 top-2 (n_group 2, topk_group 1), 4 shared
experts' worth (4096) of shared MLP, dense layer 0 of 4096; yarn rope as in build_nextn.py;
the kit's 4096-token vocabulary; bf16. 30 layers: 5.9B parameters, 11.8 GB.

Every matrix is drawn with std 1.28 / sqrt(fan_in) (0.02 at fan-in 4096, as in build_nextn.py),
so activation scales, attention sharpness and the effect of EPS do not depend on the width: a
narrow model of the same depth (probe_nextn.py on a CPU) behaves much like the full-size one.
Weights are drawn on the device (seconds on a GPU) from one seeded generator, so the same
settings on the same device give the same weights (probe_nextn.py relies on this). A checkpoint
already built with the same settings is kept (stamp file nextn_tracking.json). Prints one JSON
line with the sizes, the build and save times and the exactness checks.
"""

import argparse
import json
import os
import shutil
import time
from typing import Any

import torch
from safetensors.torch import save_file

STAMP = "nextn_tracking.json"
RECIPE = 1  # bump when the construction changes, so old builds are not reused
SHARD_BYTES = 4 << 30
GAIN = 1.28  # init std GAIN / sqrt(fan_in): the usual 0.02 at fan-in 4096


def tokenizer_ids(tok_dir: str) -> tuple[int, int, int]:
    """(bos, eos, vocab size) of the kit's tokenizer."""
    with open(os.path.join(tok_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    with open(os.path.join(tok_dir, "tokenizer_config.json")) as f:
        conf = json.load(f)
    ids = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    ids.update(tok["model"]["vocab"])
    vocab = max(ids.values()) + 1
    return ids[conf["bos_token"]], ids[conf["eos_token"]], vocab


def model_config(
    hidden: int, layers: int, experts: int, *, vocab: int, bos: int, eos: int
) -> dict[str, Any]:
    moe_inter, n_shared = hidden // 4, 4
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": vocab,
        "hidden_size": hidden,
        # the dense layer 0 is rebuilt in the NextN layer as the shared expert: same width
        "intermediate_size": moe_inter * n_shared,
        "moe_intermediate_size": moe_inter,
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // 128,
        "num_key_value_heads": hidden // 128,
        "n_shared_experts": n_shared,
        "n_routed_experts": experts,
        "num_experts_per_tok": 2,
        "n_group": 2,
        "topk_group": 1,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "ep_size": 1,
        "q_lora_rank": hidden * 3 // 8,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 16384,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        "initializer_range": GAIN / hidden**0.5,
        "use_cache": True,
        "num_nextn_predict_layers": 1,
    }


ATTN_COPIED = (
    "input_layernorm",
    "post_attention_layernorm",
    "self_attn.q_a_proj",
    "self_attn.q_a_layernorm",
    "self_attn.q_b_proj",
    "self_attn.kv_a_proj_with_mqa",
    "self_attn.kv_a_layernorm",
    "self_attn.kv_b_proj",
    "self_attn.o_proj",
)


class Weights:
    """Seeded bf16 tensors on one device, named as in a DeepSeek-V3 checkpoint."""

    def __init__(self, cfg: dict[str, Any], seed: int, device: str):
        self.cfg, self.device = cfg, device
        self.sd: dict[str, torch.Tensor] = {}
        self.g = torch.Generator(device=device).manual_seed(seed)

    def rand(self, out_f: int, in_f: int) -> torch.Tensor:
        std = GAIN / in_f**0.5
        x = torch.randn(out_f, in_f, device=self.device, generator=self.g)
        return (x * std).to(torch.bfloat16)

    def ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, device=self.device, dtype=torch.bfloat16)

    def mlp(self, p: str, inter: int) -> None:
        h = self.cfg["hidden_size"]
        self.sd[p + ".gate_proj.weight"] = self.rand(inter, h)
        self.sd[p + ".up_proj.weight"] = self.rand(inter, h)
        self.sd[p + ".down_proj.weight"] = self.rand(h, inter)

    def attention(self, p: str) -> None:
        c, sd, h = self.cfg, self.sd, self.cfg["hidden_size"]
        nh, ql, kvl = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
        nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        sd[p + ".input_layernorm.weight"] = self.ones(h)
        sd[p + ".post_attention_layernorm.weight"] = self.ones(h)
        a = p + ".self_attn"
        sd[a + ".q_a_proj.weight"] = self.rand(ql, h)
        sd[a + ".q_a_layernorm.weight"] = self.ones(ql)
        sd[a + ".q_b_proj.weight"] = self.rand(nh * (nope + rope), ql)
        sd[a + ".kv_a_proj_with_mqa.weight"] = self.rand(kvl + rope, h)
        sd[a + ".kv_a_layernorm.weight"] = self.ones(kvl)
        sd[a + ".kv_b_proj.weight"] = self.rand(nh * (nope + vd), kvl)
        sd[a + ".o_proj.weight"] = self.rand(h, nh * vd)

    def moe(self, p: str) -> None:
        c = self.cfg
        self.sd[p + ".gate.weight"] = self.rand(c["n_routed_experts"], c["hidden_size"])
        self.sd[p + ".gate.e_score_correction_bias"] = torch.zeros(
            c["n_routed_experts"], device=self.device, dtype=torch.float32
        )
        for e in range(c["n_routed_experts"]):
            self.mlp(f"{p}.experts.{e}", c["moe_intermediate_size"])
        self.mlp(p + ".shared_experts", c["moe_intermediate_size"] * c["n_shared_experts"])


def build_state_dict(cfg: dict[str, Any], seed: int, device: str) -> dict[str, torch.Tensor]:
    """The target and its tracking NextN layer, before any EPS scaling (bf16, on device)."""
    w = Weights(cfg, seed, device)
    sd, h = w.sd, cfg["hidden_size"]
    # Embedding rows of unit RMS: RMSNorm with weight 1 then returns them unchanged.
    emb = torch.randn(cfg["vocab_size"], h, device=device, generator=w.g)
    emb = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True))
    sd["model.embed_tokens.weight"] = emb.to(torch.bfloat16)
    sd["model.norm.weight"] = w.ones(h)
    sd["lm_head.weight"] = w.rand(cfg["vocab_size"], h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        w.attention(p)
        if i < cfg["first_k_dense_replace"]:
            w.mlp(p + ".mlp", cfg["intermediate_size"])
        else:
            w.moe(p + ".mlp")
    add_nextn_layer(w)
    return sd


def add_nextn_layer(w: Weights) -> None:
    """Layer 0 rebuilt as the NextN layer's MoE decoder, fed the raw embedding."""
    cfg, sd, h = w.cfg, w.sd, w.cfg["hidden_size"]
    m, t0 = f"model.layers.{cfg['num_hidden_layers']}", "model.layers.0"
    w.moe(m + ".mlp")  # router and routed experts' gate/up random: they cost what they cost
    for e in range(cfg["n_routed_experts"]):
        sd[f"{m}.mlp.experts.{e}.down_proj.weight"].zero_()
    for name in ATTN_COPIED:
        sd[f"{m}.{name}.weight"] = sd[f"{t0}.{name}.weight"].clone()
    for proj in ("gate_proj", "up_proj", "down_proj"):
        sd[f"{m}.mlp.shared_experts.{proj}.weight"] = sd[f"{t0}.mlp.{proj}.weight"].clone()
    sd[m + ".enorm.weight"] = w.ones(h)
    sd[m + ".hnorm.weight"] = w.ones(h)
    eh = torch.zeros(h, 2 * h, device=w.device, dtype=torch.bfloat16)
    eh[:, :h] = torch.eye(h, device=w.device, dtype=torch.bfloat16)
    sd[m + ".eh_proj.weight"] = eh
    sd[m + ".shared_head.norm.weight"] = sd["model.norm.weight"].clone()
    sd[m + ".shared_head.head.weight"] = sd["lm_head.weight"].clone()
    sd[m + ".embed_tokens.weight"] = sd["model.embed_tokens.weight"].clone()


def residual_write_names(sd: dict[str, torch.Tensor], cfg: dict[str, Any], k: int) -> list[str]:
    """The target's o_proj and down_proj weights of layers k..L-1 (never the NextN layer's)."""
    return [
        name
        for name in sd
        if name.startswith("model.layers.")
        and k <= int(name.split(".")[2]) < cfg["num_hidden_layers"]
        and name.endswith((".self_attn.o_proj.weight", ".down_proj.weight"))
    ]


@torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
def scale_residual_writes(
    sd: dict[str, torch.Tensor], cfg: dict[str, Any], k: int, eps: float
) -> None:
    """Multiply the residual writes of the target's layers from k on by eps, in place."""
    for name in residual_write_names(sd, cfg, k):
        sd[name].mul_(eps)


@torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
def exactness_checks(sd: dict[str, torch.Tensor], cfg: dict[str, Any]) -> dict[str, Any]:
    """enorm(embed) == embed in bf16 (SGLang's RMSNorm: fp32 math, one rounding), eh_proj == [I, 0]."""
    emb = sd["model.embed_tokens.weight"]
    x = emb.float()
    y = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"])).to(emb.dtype)
    rows_changed = int((y != emb).any(-1).sum())
    h = cfg["hidden_size"]
    eh = sd[f"model.layers.{cfg['num_hidden_layers']}.eh_proj.weight"]
    probe = emb[:64]
    passed = torch.cat([probe, torch.randn_like(probe.float()).to(probe.dtype)], -1) @ eh.T
    return {
        "enorm_rows_changed": rows_changed,
        "eh_proj_exact": bool(torch.equal(passed, probe)) and eh.shape == (h, 2 * h),
    }


def save_sharded(sd: dict[str, torch.Tensor], out: str) -> int:
    """Write model-0000i-of-0000n.safetensors shards and the index; returns the total bytes."""
    shards: list[dict[str, torch.Tensor]] = []
    cur: dict[str, torch.Tensor] = {}
    size = 0
    for name, t in sd.items():
        nbytes = t.numel() * t.element_size()
        if cur and size + nbytes > SHARD_BYTES:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = t
        size += nbytes
    shards.append(cur)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        cpu = {k: v.contiguous().cpu() for k, v in shard.items()}
        save_file(cpu, os.path.join(out, fname), metadata={"format": "pt"})
        total += sum(v.numel() * v.element_size() for v in cpu.values())
        weight_map.update(dict.fromkeys(cpu, fname))
        del cpu
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    return total


def build(out: str, tok: str, a: argparse.Namespace) -> dict[str, Any]:
    t0 = time.time()
    bos, eos, vocab = tokenizer_ids(tok)
    cfg = model_config(a.hidden, a.layers, a.experts, vocab=vocab, bos=bos, eos=eos)
    sd = build_state_dict(cfg, a.seed, a.device)
    scale_residual_writes(sd, cfg, a.k, a.eps)
    checks = exactness_checks(sd, cfg)
    if a.device == "cuda":
        torch.cuda.synchronize()
    t1 = time.time()
    nbytes = save_sharded(sd, out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, f)
    for name in os.listdir(tok):
        if os.path.isfile(os.path.join(tok, name)):
            shutil.copy(os.path.join(tok, name), os.path.join(out, name))
    nextn = f"model.layers.{a.layers}."
    return {
        "params": sum(v.numel() for v in sd.values()),
        "nextn_params": sum(v.numel() for k, v in sd.items() if k.startswith(nextn)),
        "bytes": nbytes,
        "build_s": round(t1 - t0, 1),
        "save_s": round(time.time() - t1, 1),
        **checks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("tokenizer_dir")
    ap.add_argument("--eps", type=float, default=0.01)
    ap.add_argument(
        "--k", type=int, default=1, help="target layers left unscaled (the NextN copies layer 0)"
    )
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    check_args(ap, a)
    want = {
        "recipe": RECIPE,
        **{k: getattr(a, k) for k in ("eps", "k", "hidden", "layers", "experts", "seed", "device")},
    }
    stamp = os.path.join(a.out_dir, STAMP)
    if os.path.isfile(stamp):
        with open(stamp) as f:
            have = json.load(f)
        if {key: have.get(key) for key in want} == want:
            print(json.dumps({**have, "reused": True}))
            return
    shutil.rmtree(a.out_dir, ignore_errors=True)
    os.makedirs(a.out_dir)
    info = {**want, **build(a.out_dir, a.tokenizer_dir, a)}
    with open(stamp, "w") as f:
        json.dump(info, f)
    print(json.dumps(info))


def check_args(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    # SGLang's fused_eh_norm (CUDA) takes hidden sizes in (256, 8192], multiples of 256;
    # MLA needs whole 128-wide heads.
    if not (256 < a.hidden <= 8192 and a.hidden % 256 == 0):
        ap.error("--hidden must be a multiple of 256 in (256, 8192] (SGLang's fused_eh_norm)")
    if not 1 <= a.k < a.layers:
        ap.error("--k must be between 1 and --layers - 1")
    if not 0 <= a.eps <= 1:
        ap.error("--eps must be between 0 and 1")
    # two expert groups (topk_group 1) whose group score is the sum of their top 2
    if a.experts < 4 or a.experts % 2:
        ap.error("--experts must be even and at least 4")


if __name__ == "__main__":
    main()
