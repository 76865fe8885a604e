# (prints a table; run on the CPU at reduced size or on the GPU host at full size)
"""Plain-torch greedy agreement between the testbed target and EAGLE / EAGLE3 heads built from it.

usage: python3 probe_eagle.py [--device cpu|cuda] [--full | --hidden 1024 --layers 8 --heads 8
                              --kv-heads 2 --inter 2752] [--k 2] [--eps 0.02,0.05,0.1]
                              [--seqs 8 --len 256] [--target DIR] [--head DIR ...] [--json FILE]

The target is built with build_pair.py's recipe (seed 0, bf16, layers from K on with o_proj
and down_proj scaled by EPS) at the size given (--full: the GPU host's 4096 x 32 layers), or
loaded from --target (--eps is then ignored). The heads (eagle, eagle3, their --exact forms,
and eagle3-naive: no scaled final norm) come from build_eagle_head.make_head, plus any --head
directory, and run through a plain-torch copy of SGLang 0.5.16's forward passes
(llama_eagle3.py, llama_eagle.py) with EAGLE's shift: the head at position i reads token i+1
and the target's hidden state at i. Teacher-forced on random token ids.

Per head: p1 = P(head argmax == target argmax) with the target's state fed (draft step 1);
p2, p3 = the same with the head's own previous output fed back (steps 2, 3); chain =
1+p1+p1*p2+p1*p2*p3; track = P(head argmax == the first K layers' argmax on the shifted
prefix). Reference rows: standalone (first K layers, same prefix) and standalone-shifted
(without the first token, as SGLang's STANDALONE runs). Checks at the first EPS: impl_check
(against transformers' forward) and fp32_check (against this forward in fp32).
"""

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor
from torch.nn import functional as nnf
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_eagle_head import make_head

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()


# ---------------------------------------------------------------- SGLang-semantics forward
def rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x: Tensor, pos: Tensor, theta: float) -> Tensor:
    """Neox-style rotary embedding (SGLang get_rope, is_neox_style=True; transformers' Llama)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    f = pos.float()[:, None] * inv[None]
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def _identity(x: Tensor) -> Tensor:
    return x


class Net:
    """Weights (checkpoint names) + config; the layer math shared by all forwards."""

    def __init__(self, sd: dict[str, Tensor], cfg: dict[str, Any], prefix: str) -> None:
        self.sd, self.cfg, self.p = sd, cfg, prefix
        self.h = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.h // self.nh
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        rp = cfg.get("rope_parameters") or {}
        self.theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))

    def w(self, name: str) -> Tensor:
        return self.sd[self.p + name]

    def norm(self, x: Tensor, name: str) -> Tensor:
        return rms(x, self.w(name), self.eps)

    def attn(self, x: Tensor, i: int, pos: Tensor) -> Tensor:
        b, t, _ = x.shape
        pre = f"layers.{i}.self_attn."
        q = (x @ self.w(pre + "q_proj.weight").T).view(b, t, self.nh, self.hd)
        k = (x @ self.w(pre + "k_proj.weight").T).view(b, t, self.nkv, self.hd)
        v = (x @ self.w(pre + "v_proj.weight").T).view(b, t, self.nkv, self.hd)
        q, k = rope(q, pos[:, None], self.theta), rope(k, pos[:, None], self.theta)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        g = self.nh // self.nkv
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        o = nnf.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(b, t, -1) @ self.w(pre + "o_proj.weight").T

    def mlp(self, x: Tensor, i: int) -> Tensor:
        pre = f"layers.{i}.mlp."
        gate = x @ self.w(pre + "gate_proj.weight").T
        up = x @ self.w(pre + "up_proj.weight").T
        return (nnf.silu(gate) * up) @ self.w(pre + "down_proj.weight").T

    def layer(
        self,
        x: Tensor,
        residual: Tensor | None,
        i: int,
        pos: Tensor,
        input_norm: Callable[[Tensor], Tensor],
    ) -> tuple[Tensor, Tensor]:
        """SGLang LlamaDecoderLayer.forward with the fused add-norms; returns (mlp out, residual)."""
        if residual is None:
            residual, x = x, input_norm(x)
        else:
            residual = x + residual
            x = input_norm(residual)
        residual = self.attn(x, i, pos) + residual
        x = self.norm(residual, f"layers.{i}.post_attention_layernorm.weight")
        return self.mlp(x, i), residual


def llama_forward(
    net: Net, ids: Tensor, n_layers: int, lm_head: Tensor, capture: Collection[int] = ()
) -> tuple[Tensor, dict[int, Tensor], Tensor]:
    """The target's first n_layers + final norm + LM head (SGLang llama.py LlamaModel).

    Returns (logits, {i: stream before layer i for i in capture}, final normed hidden state).
    """
    pos = torch.arange(ids.shape[1], device=ids.device)
    x, res, streams = net.w("embed_tokens.weight")[ids], None, {}
    for i in range(n_layers):
        if i in capture:  # SGLang: aux_hidden_states.append(hidden_states + residual)
            streams[i] = x + res
        name = f"layers.{i}.input_layernorm.weight"
        x, res = net.layer(x, res, i, pos, functools.partial(net.norm, name=name))
    normed = net.norm(x + res, "norm.weight")
    return normed @ lm_head.T, streams, normed


def eagle3_forward(
    net: Net, ids: Tensor, hidden_in: Tensor, lm_head: Tensor
) -> tuple[Tensor, Tensor]:
    """llama_eagle3.py LlamaModel.forward + LlamaForCausalLMEagle3 logits; (logits, fed-back state)."""
    pos = torch.arange(ids.shape[1], device=ids.device)
    emb = net.w("embed_tokens.weight")[ids]
    x = hidden_in @ net.w("fc.weight").T if hidden_in.shape[-1] != emb.shape[-1] else hidden_in
    embeds = net.norm(emb, "layers.0.input_layernorm.weight")
    res = None
    for i in range(net.cfg["num_hidden_layers"]):
        name = f"layers.{i}.hidden_norm.weight"
        if (
            i == 0
        ):  # the input layer: residual = hidden, attention reads [norm(embeds), norm(hidden)]
            x, res = net.layer(
                x,
                None,
                0,
                pos,
                lambda y: torch.cat([embeds, net.norm(y, "layers.0.hidden_norm.weight")], -1),
            )
        else:
            x, res = net.layer(x, res, i, pos, functools.partial(net.norm, name=name))
    final = x + res
    normed = net.norm(final, "norm.weight")
    return normed @ lm_head.T, (normed if net.cfg.get("norm_output") else final)


def eagle_forward(
    net: Net, ids: Tensor, hidden_in: Tensor, lm_head: Tensor
) -> tuple[Tensor, Tensor]:
    """llama_eagle.py LlamaModel.forward (no layer-0 input norm, no final norm); (logits, state)."""
    pos = torch.arange(ids.shape[1], device=ids.device)
    emb = net.w("embed_tokens.weight")[ids]
    x = torch.cat([emb, hidden_in], -1) @ net.w("fc.weight").T + net.w("fc.bias")
    res = None
    for i in range(net.cfg["num_hidden_layers"]):
        name = f"layers.{i}.input_layernorm.weight"
        x, res = net.layer(
            x, res, i, pos, _identity if i == 0 else functools.partial(net.norm, name=name)
        )
    out = x + res
    return out @ lm_head.T, out


# ---------------------------------------------------------------- target and heads
def build_target(a: argparse.Namespace) -> Any:
    if a.target:
        return LlamaForCausalLM.from_pretrained(a.target, dtype=torch.bfloat16).to(a.device).eval()
    torch.manual_seed(a.seed)
    cfg = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.inter,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    with torch.device(a.device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    return model.eval()


def head_net(kind: str, hsd: dict[str, Tensor], hcfg: dict[str, Any]) -> tuple[str, Net]:
    return kind, Net(hsd, hcfg, "model." if kind == "eagle3" else "")


def make_heads(
    a: argparse.Namespace, cfg: dict[str, Any], sd: dict[str, Tensor]
) -> dict[str, tuple[str, Net]]:
    """The in-memory heads, plus those read from --head directories."""
    heads: dict[str, tuple[str, Net]] = {}
    for name, kind, kw in (
        ("eagle", "eagle", {}),
        ("eagle-exact", "eagle", {"exact": True}),
        ("eagle3", "eagle3", {}),
        ("eagle3-exact", "eagle3", {"exact": True}),
        ("eagle3-naive", "eagle3", {"exact": True, "delta_log2": 0}),
    ):
        hcfg, hsd = make_head(cfg, sd, kind, a.k, **{"delta_log2": a.delta_log2, **kw})
        if name == "eagle3-naive":  # the obvious head: the raw residual fed back, no scaled norm
            hcfg["norm_output"] = False
        heads[name] = head_net(kind, hsd, hcfg)
    for d in a.head:
        with open(os.path.join(d, "config.json")) as f:
            hcfg = json.load(f)
        kind = "eagle3" if hcfg["architectures"][0].endswith("Eagle3") else "eagle"
        hsd = load_file(os.path.join(d, "model.safetensors"), device=a.device)
        heads["file:" + os.path.basename(os.path.normpath(d))] = head_net(kind, hsd, hcfg)
    return heads


def aux_layers(net: Net) -> list[int]:
    """Layers whose input stream SGLang captures for this EAGLE3 head (set_eagle3_layers_to_capture)."""
    return [i + 1 for i in net.cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]]


# ---------------------------------------------------------------- probe
def head_rows(
    heads: dict[str, tuple[str, Net]],
    ids: Tensor,
    target: tuple[Tensor, dict[int, Tensor], Tensor, Tensor],
    ref_shift: Tensor,
) -> list[dict[str, Any]]:
    """p1..p3 and track for every head; target = (argmax, streams, final normed hidden, LM head)."""
    g, streams, final_hidden, lm_head = target
    rows = []
    tok = ids[:, 1:]  # the draft at position i reads token i+1 ...
    want = g[:, 1:]  # ... and should predict the target's next token after it
    for name, (kind, net) in heads.items():
        if kind == "eagle3":
            fwd, head_lm = eagle3_forward, net.sd["lm_head.weight"]
            fed = torch.cat([streams[i] for i in aux_layers(net)], -1)[:, :-1]
        else:
            fwd, head_lm, fed = eagle_forward, lm_head, final_hidden[:, :-1]
        ps, track = [], None
        for step in range(3):
            logits, own = fwd(net, tok, fed, head_lm)
            d = logits.argmax(-1)
            sl = slice(step, None)  # step s needs s earlier positions of its own output
            ps.append((d[:, sl] == want[:, sl]).float().mean().item())
            if step == 0:
                track = (d == ref_shift).float().mean().item()
            # position i gets position i-1's output (position 0, never scored after step 1, its own)
            fed = torch.cat([own[:, :1], own[:, :-1]], 1)
        rows.append({"head": name, "p1": ps[0], "p2": ps[1], "p3": ps[2], "track": track})
    return rows


def finish(row: dict[str, Any]) -> dict[str, Any]:
    p1, p2, p3 = row["p1"], row["p2"], row["p3"]
    row["accept_1pp2p3"] = 1 + p1 + p1 * p1 + p1**3
    row["chain"] = 1 + p1 + p1 * p2 + p1 * p2 * p3
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'head':<24}{'p1':>8}{'p2':>8}{'p3':>8}{'1+p+p2+p3':>11}{'chain':>8}{'track':>8}")
    for r in rows:
        tr = "-" if r["track"] is None else f"{r['track']:.3f}"
        print(
            f"{r['head']:<24}{r['p1']:>8.3f}{r['p2']:>8.3f}{r['p3']:>8.3f}"
            f"{r['accept_1pp2p3']:>11.2f}{r['chain']:>8.2f}{tr:>8}",
            flush=True,
        )


def checks(model: Any, tnet: Net, ids: Tensor, g: Tensor) -> dict[str, float]:
    """transformers' forward, and this file's in fp32, against the bf16 target argmax g."""
    n = tnet.cfg["num_hidden_layers"]
    out = {"impl_check": round((model(ids).logits.argmax(-1) == g).float().mean().item(), 4)}
    fnet = Net({k: t.float() for k, t in tnet.sd.items()}, tnet.cfg, "model.")
    g32 = llama_forward(fnet, ids, n, fnet.sd["lm_head.weight"])[0].argmax(-1)
    out["fp32_check"] = round((g32 == g).float().mean().item(), 4)
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--full", action="store_true", help="the GPU host's size (hidden 4096, 32 layers)"
    )
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--inter", type=int, default=2752)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--eps", default="0.02,0.05,0.1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--delta-log2", type=int, default=16)
    ap.add_argument("--target", help="a build_pair.py target directory instead of building one")
    ap.add_argument(
        "--head",
        action="append",
        default=[],
        metavar="DIR",
        help="also probe a head written by build_eagle_head.py (repeatable)",
    )
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args()
    if a.full:
        a.hidden, a.layers, a.heads, a.kv_heads, a.inter = 4096, 32, 32, 8, 11008
    return a


@torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
def main() -> None:
    a = parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    t0 = time.time()
    model = build_target(a)
    cfg = model.config.to_dict()
    n_layers = cfg["num_hidden_layers"]
    print(
        f"target: hidden {cfg['hidden_size']}, {n_layers} layers, {cfg['num_attention_heads']} heads "
        f"({cfg['num_key_value_heads']} KV), MLP {cfg['intermediate_size']}, vocab {cfg['vocab_size']}, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, built in {time.time() - t0:.1f}s",
        flush=True,
    )
    sd = {n: p.detach() for n, p in model.state_dict().items()}  # shares storage with the model
    tnet, lm_head = Net(sd, cfg, "model."), sd["lm_head.weight"]
    heads = make_heads(a, cfg, sd)
    gen = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, cfg["vocab_size"], (a.seqs, a.len), generator=gen).to(a.device)
    capture = sorted(
        {i for kind, net in heads.values() if kind == "eagle3" for i in aux_layers(net)}
    )
    d_std = llama_forward(tnet, ids, a.k, lm_head)[0].argmax(-1)  # first K layers, same prefix
    d_shift = llama_forward(tnet, ids[:, 1:], a.k, lm_head)[0].argmax(-1)  # without the first token
    layers = model.model.layers
    orig = {
        i: (layers[i].self_attn.o_proj.weight.clone(), layers[i].mlp.down_proj.weight.clone())
        for i in range(a.k, n_layers)
    }
    eps_list = [None] if a.target else [float(e) for e in a.eps.split(",")]
    out = []
    for eps in eps_list:
        t1 = time.time()
        if eps is not None:  # the heads use layers < K only, so they stay valid
            for i, (o, d) in orig.items():
                layers[i].self_attn.o_proj.weight.copy_(o * eps)
                layers[i].mlp.down_proj.weight.copy_(d * eps)
        logits, streams, final_hidden = llama_forward(tnet, ids, n_layers, lm_head, capture)
        g = logits.argmax(-1)
        del logits
        rows = [
            {"head": "standalone", "p1": (d_std == g).float().mean().item()},
            {"head": "standalone-shifted", "p1": (d_shift == g[:, 1:]).float().mean().item()},
        ]
        for r in rows:
            r.update(p2=r["p1"], p3=r["p1"], track=None)
        rows += head_rows(heads, ids, (g, streams, final_hidden, lm_head), d_shift)
        chk = checks(model, tnet, ids, g) if eps == eps_list[0] else {}
        note = "".join(f"{k} {v}, " for k, v in chk.items())
        print(f"\nK={a.k} EPS={eps}  ({note}{time.time() - t1:.1f}s)")
        rows = [finish(r) for r in rows]
        print_table(rows)
        out += [{"eps": eps, "k": a.k, **chk, **r} for r in rows]
    meta = {
        "hidden": cfg["hidden_size"],
        "layers": n_layers,
        "heads": cfg["num_attention_heads"],
        "kv_heads": cfg["num_key_value_heads"],
        "inter": cfg["intermediate_size"],
        "vocab": cfg["vocab_size"],
        "seqs": a.seqs,
        "len": a.len,
        "seed": a.seed,
        "device": a.device,
        "torch": torch.__version__,
        "total_s": round(time.time() - t0, 1),
    }
    print(f"\ntotal {meta['total_s']}s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
