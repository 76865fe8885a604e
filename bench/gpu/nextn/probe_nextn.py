# (a measuring script: it prints a table and writes one JSON file)
"""How often does the checkpoint's own NextN layer draft the target's next greedy token?

usage: python3 probe_nextn.py [--device cpu|cuda] [--hidden 4096] [--layers 30] [--experts 8]
           [--k 1] [--seed 0] [--eps 0,0.02,0.05,0.1,0.2] [--dtype float32|bfloat16]
           [--batch 8] [--seq 256] [--prompts FILE.json --tokenizer DIR [--gen 64]]
           [--json OUT.json]

Builds the weights of build_nextn_tracking.py in memory (same code, seed and device, so on the
same device they are the weights that script writes), once with EPS = 1, then for each EPS
scales the target's residual writes as that script does and runs, in plain torch:

  target  the DeepSeek-V3 forward as SGLang 0.5.16 computes it: MLA (q/kv low-rank, RMSNorms,
          interleaved RoPE on the 64 rope dims with DeepSeek-YaRN frequencies, softmax scale
          192^-0.5 * mscale^2 as compute_mla_mscale_scaling), dense layer 0, then MoE layers
          (sigmoid scores + e_score_correction_bias, 2 groups / topk_group 1, top-2,
          renormalised, * routed_scaling_factor, plus the shared expert), final norm, LM head;
  NextN   SGLang's DeepseekModelNextN: embed (the target's) -> cat(enorm(e), hnorm(h)) ->
          eh_proj -> one MoE decoder layer -> shared_head.norm(hidden + residual) -> the target's
          LM head, where h is the target's final (post-norm) hidden state at the previous position.

and reports per-token greedy agreement p between the two and the accept length this predicts
for 3 draft steps with topk 1, 1 + p + p^2 + p^3:
  shifted  with EAGLE's shift, as SGLang runs it: the draft at position i reads token i+1 and the
           target's hidden state at i, so it never sees the first token;
  aligned  the NextN layer on the unshifted sequence (what the target's layer 0 alone predicts):
           at EPS = 0 this must be 1.0 with identical logits, which checks the construction.
Contexts: --batch random sequences of --seq token ids (agreement also by position), or with
--prompts (a ShareGPT-style JSON list such as ../testbed/prompts_sharegpt128.json, or a list of
strings) each prompt's first --batch entries, tokenized with --tokenizer (needs the `tokenizers`
package), continued by the target's own greedy output for --gen tokens, the agreement being
taken on that continuation only, as a server produces it.

Simplification: rounding. --dtype bfloat16 (default on cuda) runs every matmul in bf16 like the
server, float32 (default on cpu) upcasts the bf16 weights; neither reproduces SGLang's kernels
(triton MLA, fused MoE, different shapes for decode, draft and verify). On the H200 the
server's accept length came within 0.1 of the --prompts prediction (README.md).

CPU, reduced width and full depth (seconds per EPS):
    python3 probe_nextn.py --device cpu --hidden 512 --layers 30
GPU host, full size (after the kit's setup.sh and `. .gpu/env.sh`):
    python3 probe_nextn.py --device cuda [--prompts ../testbed/prompts_sharegpt128.json --batch 16]
"""

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.functional import scaled_dot_product_attention, silu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_nextn_tracking import (
    build_state_dict,
    model_config,
    residual_write_names,
    scale_residual_writes,
    tokenizer_ids,
)


def yarn_cos_sin(
    cfg: dict[str, Any], max_pos: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's DeepseekScalingRotaryEmbedding cache (rope_variant.py), cos and sin [max_pos, 32]."""
    rs, dim, base = cfg["rope_scaling"], cfg["qk_rope_head_dim"], cfg["rope_theta"]
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]

    def mscale(scale: float, m: float) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    def corr_dim(rot: float) -> float:
        return float(dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base)))

    low = max(math.floor(corr_dim(rs["beta_fast"])), 0)
    high = min(math.ceil(corr_dim(rs["beta_slow"])), dim - 1)
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim)
    ramp = (
        (torch.arange(dim // 2, dtype=torch.float32, device=device) - low) / (high - low)
    ).clamp(0, 1)
    extra = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    m = mscale(factor, rs.get("mscale", 1)) / mscale(factor, rs.get("mscale_all_dim", 0))
    freqs = torch.arange(max_pos, dtype=torch.float32, device=device)[:, None] * inv_freq[None]
    return freqs.cos() * m, freqs.sin() * m


def softmax_scale(cfg: dict[str, Any]) -> float:
    """DeepseekV2AttentionMLA.scaling: qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2."""
    rs = cfg["rope_scaling"]
    m = 0.1 * rs.get("mscale_all_dim", 0) * math.log(rs["factor"]) + 1.0
    return float((cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5 * m * m)


class DeepseekV3:
    """Plain-torch forward of the checkpoint's target and of its NextN layer."""

    def __init__(
        self, cfg: dict[str, Any], sd: dict[str, torch.Tensor], dtype: torch.dtype, max_pos: int
    ):
        self.cfg, self.sd, self.dtype = cfg, sd, dtype
        dev = next(iter(sd.values())).device
        self.cos, self.sin = yarn_cos_sin(cfg, max_pos, str(dev))
        self.scale = softmax_scale(cfg)
        self.eps = cfg["rms_norm_eps"]

    def w(self, name: str) -> torch.Tensor:
        t = self.sd[name]
        return t if t.dtype in (self.dtype, torch.float32) else t.to(self.dtype)

    def norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.w(name).float()).to(self.dtype)

    def lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ self.w(name).T

    def rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Interleaved (GPT-J style, is_neox_style False) rotation; x [B, T, heads, 64]."""
        cos, sin = self.cos[pos][:, :, None], self.sin[pos][:, :, None]
        x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
        out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2)
        return out.to(x.dtype)

    def attention(
        self, p: str, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        c = self.cfg
        b, t, _ = x.shape
        nh, nope, rope, vd = (
            c["num_attention_heads"],
            c["qk_nope_head_dim"],
            c["qk_rope_head_dim"],
            c["v_head_dim"],
        )
        a = p + ".self_attn"
        q = self.lin(
            self.norm(self.lin(x, a + ".q_a_proj.weight"), a + ".q_a_layernorm.weight"),
            a + ".q_b_proj.weight",
        ).view(b, t, nh, nope + rope)
        q_nope, q_pe = q.split([nope, rope], -1)
        kv_a = self.lin(x, a + ".kv_a_proj_with_mqa.weight")
        latent, k_pe = kv_a.split([c["kv_lora_rank"], rope], -1)
        kv = self.lin(self.norm(latent, a + ".kv_a_layernorm.weight"), a + ".kv_b_proj.weight")
        k_nope, v = kv.view(b, t, nh, nope + vd).split([nope, vd], -1)
        q = torch.cat([q_nope, self.rope(q_pe, pos)], -1)
        k = torch.cat([k_nope, self.rope(k_pe[:, :, None], pos).expand(b, t, nh, rope)], -1)
        out = scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            is_causal=mask is None,
            scale=self.scale,
        )
        return self.lin(out.transpose(1, 2).reshape(b, t, nh * vd), a + ".o_proj.weight")

    def mlp(self, p: str, x: torch.Tensor) -> torch.Tensor:
        g, u = self.lin(x, p + ".gate_proj.weight"), self.lin(x, p + ".up_proj.weight")
        return self.lin(silu(g) * u, p + ".down_proj.weight")

    def moe(self, p: str, x: torch.Tensor) -> torch.Tensor:
        """SGLang's DeepseekV2MoE with biased_grouped_topk (topk.py) and the shared expert."""
        c, shape = self.cfg, x.shape
        x = x.reshape(-1, shape[-1])
        n, e = x.shape[0], c["n_routed_experts"]
        scores = (x.float() @ self.sd[p + ".gate.weight"].float().T).sigmoid()
        choice = scores + self.sd[p + ".gate.e_score_correction_bias"].float()[None]
        groups = choice.view(n, c["n_group"], -1).topk(2, -1)[0].sum(-1)
        keep = torch.zeros_like(groups).scatter_(1, groups.topk(c["topk_group"], -1)[1], 1)
        keep = keep[:, :, None].expand(n, c["n_group"], e // c["n_group"]).reshape(n, e)
        ids = choice.masked_fill(keep == 0, float("-inf")).topk(c["num_experts_per_tok"], -1)[1]
        wts = scores.gather(1, ids)
        wts = wts / wts.sum(-1, keepdim=True) * c["routed_scaling_factor"]
        routed = torch.zeros(n, shape[-1], dtype=torch.float32, device=x.device)
        for j in range(e):
            tok, slot = (ids == j).nonzero(as_tuple=True)
            if tok.numel():
                y = self.mlp(f"{p}.experts.{j}", x[tok]).float()
                routed.index_add_(0, tok, y * wts[tok, slot][:, None])
        out = routed.to(self.dtype) + self.mlp(p + ".shared_experts", x)
        return out.view(shape)

    def layer(
        self,
        i: int,
        h: torch.Tensor,
        res: torch.Tensor | None,
        pos: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder layer with SGLang's fused add-RMSNorm residual handling."""
        p = f"model.layers.{i}"
        res = h if res is None else (h.float() + res.float()).to(self.dtype)
        h = self.attention(p, self.norm(res, p + ".input_layernorm.weight"), pos, mask)
        res = (h.float() + res.float()).to(self.dtype)
        h = self.norm(res, p + ".post_attention_layernorm.weight")
        sparse = i >= self.cfg["first_k_dense_replace"]  # the NextN layer (i = L) is sparse too
        h = self.moe(p + ".mlp", h) if sparse else self.mlp(p + ".mlp", h)
        return h, res

    def final(self, h: torch.Tensor, res: torch.Tensor, norm_name: str) -> torch.Tensor:
        return self.norm((h.float() + res.float()).to(self.dtype), norm_name)

    @torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
    def target(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and the post-norm final hidden state (what SGLang hands the draft)."""
        h, res = self.sd["model.embed_tokens.weight"][ids].to(self.dtype), None
        for i in range(self.cfg["num_hidden_layers"]):
            h, res = self.layer(i, h, res, pos, mask)
        hidden = self.final(h, res, "model.norm.weight")
        return self.lin(hidden, "lm_head.weight").float(), hidden

    @torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
    def nextn(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        prev_hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """DeepseekModelNextN.forward plus the target's LM head (set_embed_and_head)."""
        n_layers = self.cfg["num_hidden_layers"]
        p = f"model.layers.{n_layers}"
        e = self.sd["model.embed_tokens.weight"][ids].to(self.dtype)
        eh = torch.cat(
            [self.norm(e, p + ".enorm.weight"), self.norm(prev_hidden, p + ".hnorm.weight")], -1
        )
        h, res = self.layer(n_layers, self.lin(eh, p + ".eh_proj.weight"), None, pos, mask)
        return self.lin(
            self.final(h, res, p + ".shared_head.norm.weight"), "lm_head.weight"
        ).float()


Contexts = list[list[int]] | tuple[torch.Tensor, torch.Tensor]
"""``run_eps``' contexts: prompts' token ids (``--prompts``), or random ids and their positions."""


def pad_mask(valid: torch.Tensor) -> torch.Tensor:
    """Causal mask over valid keys; a padding query sees itself, so no row is empty (no NaN)."""
    t = valid.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=valid.device).tril()
    eye = torch.eye(t, dtype=torch.bool, device=valid.device)
    return ((causal[None] & valid[:, None, :]) | eye[None])[:, None]


def load_prompts(path: str, tok_dir: str, n: int, bos: int, max_len: int) -> list[list[int]]:
    from tokenizers import Tokenizer

    with open(path) as f:
        data = json.load(f)
    texts = [d if isinstance(d, str) else d["conversations"][0]["value"] for d in data[:n]]
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    return [[bos, *tok.encode(t, add_special_tokens=False).ids][:max_len] for t in texts]


@torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
def greedy_continue(
    model: DeepseekV3, prompts: list[list[int]], n_new: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Left-padded batch, continued by the target's greedy argmax (full recompute per token)."""
    t = max(map(len, prompts))
    ids = torch.zeros(len(prompts), t + n_new, dtype=torch.long, device=device)
    valid = torch.zeros_like(ids, dtype=torch.bool)
    for b, pr in enumerate(prompts):
        ids[b, t - len(pr) : t] = torch.tensor(pr, device=device)
        valid[b, t - len(pr) :] = True
    pos = (valid.cumsum(1) - 1).clamp(min=0)
    for s in range(n_new):
        cur = t + s
        logits, _ = model.target(ids[:, :cur], pos[:, :cur], pad_mask(valid[:, :cur]))
        ids[:, cur] = logits[:, -1].argmax(-1)
    return ids, pos, valid, t


@torch.no_grad()  # type: ignore[untyped-decorator]  # torch: no stubs on the checking host
def agreement(
    model: DeepseekV3,
    ids: torch.Tensor,
    pos: torch.Tensor,
    valid: torch.Tensor | None,
    measure_from: int,
) -> dict[str, Any]:
    """Shifted (EAGLE) and aligned agreement over target positions j >= measure_from."""
    mask = None if valid is None else pad_mask(valid)
    logits, hidden = model.target(ids, pos, mask)
    tgt = logits.argmax(-1)  # tgt[:, j] predicts token j+1
    # EAGLE shift: draft column c reads token c+1 at position c with the target's hidden at c,
    # and predicts token c+2, i.e. what the target predicts at column c+1.
    smask = None if valid is None else pad_mask(valid[:, :-1])
    shifted = model.nextn(ids[:, 1:], pos[:, :-1], hidden[:, :-1], smask).argmax(-1)
    aligned_logits = model.nextn(ids, pos, hidden, mask)
    js = torch.arange(max(measure_from, 1), ids.shape[1], device=ids.device)
    ok_s = (shifted[:, js - 1] == tgt[:, js]).float()
    ok_a = (aligned_logits.argmax(-1)[:, js] == tgt[:, js]).float()
    if valid is not None:  # columns whose shifted draft input is real (the first token dropped)
        live = valid[:, js - 1].float()
        ok_s, ok_a = ok_s * live, ok_a * valid[:, js].float()
        n_s, n_a = live.sum().item(), valid[:, js].float().sum().item()
    else:
        n_s = n_a = float(ok_s.numel())
    out = {
        "shifted": ok_s.sum().item() / n_s,
        "aligned": ok_a.sum().item() / n_a,
        "max_abs_logit_diff_aligned": (aligned_logits - logits).abs().max().item(),
        "tokens": int(n_s),
    }
    if valid is None:  # random contexts: agreement by position of the predicted token
        for lo, hi in ((1, 16), (16, 64), (64, ids.shape[1])):
            sel = (js >= lo) & (js < hi)
            if sel.any():
                out[f"shifted_pos_{lo}_{hi}"] = ok_s[:, sel].mean().item()
    return out


def accept_len(p: float, steps: int = 3) -> float:
    return sum(p**i for i in range(steps + 1))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eps", default="0,0.02,0.05,0.1,0.2")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--prompts", help="real prompts, continued greedily by the target")
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: the kit's)")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--max-prompt", type=int, default=256)
    ap.add_argument("--json", default=None)
    return ap.parse_args()


def kit_tokenizer(a: argparse.Namespace) -> str:
    """--tokenizer, else the kit's: .gpu/tokenizer in the checkout, or ../shared/gpu/tokenizer."""
    if a.tokenizer:
        return str(a.tokenizer)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    for d in (
        os.path.join(root, ".gpu", "tokenizer"),
        os.path.join(root, "..", "shared", "gpu", "tokenizer"),
    ):
        if os.path.isdir(d):
            return os.path.normpath(d)
    raise SystemExit("no tokenizer: pass --tokenizer DIR")


def run_eps(
    model: DeepseekV3, orig: dict[str, Any], eps: float, a: argparse.Namespace, ctx: Contexts
) -> dict[str, Any]:
    """Scale the residual writes for eps (from the bf16 originals, as the builder does) and measure."""
    sd, cfg = model.sd, model.cfg
    for n, t in orig.items():
        sd[n] = t.clone()
    scale_residual_writes(sd, cfg, a.k, eps)
    if model.dtype == torch.float32:
        for n in orig:
            sd[n] = sd[n].float()
    t1 = time.time()
    if isinstance(ctx, list):  # --prompts: token ids, continued greedily here
        ids, pos, valid, start = greedy_continue(model, ctx, a.gen, a.device)
        r = agreement(model, ids, pos, valid, start)
    else:
        r = agreement(model, ctx[0], ctx[1], None, 1)
    return {
        "eps": eps,
        **r,
        "accept_len_shifted": accept_len(r["shifted"]),
        "accept_len_aligned": accept_len(r["aligned"]),
        "seconds": round(time.time() - t1, 1),
    }


def main() -> None:
    a = parse_args()
    dtype = getattr(torch, a.dtype or ("bfloat16" if a.device == "cuda" else "float32"))
    tok_dir = kit_tokenizer(a)
    bos, eos, vocab = tokenizer_ids(tok_dir)
    cfg = model_config(a.hidden, a.layers, a.experts, vocab=vocab, bos=bos, eos=eos)

    t0 = time.time()
    sd = build_state_dict(cfg, a.seed, a.device)
    orig = {n: sd[n].clone() for n in residual_write_names(sd, cfg, a.k)}
    if dtype == torch.float32:  # upcast once; EPS scaling still happens on the bf16 originals
        sd = {n: (t if t.dtype == torch.float32 else t.float()) for n, t in sd.items()}
    n_params = sum(t.numel() for t in sd.values())
    print(
        f"weights: hidden {a.hidden}, {a.layers} layers + NextN, {n_params / 1e9:.3f}B params, "
        f"{a.device} {dtype}, built in {time.time() - t0:.1f}s",
        flush=True,
    )
    if a.prompts:
        ctx: Contexts = load_prompts(a.prompts, tok_dir, a.batch, bos, a.max_prompt)
        max_pos = max(map(len, ctx)) + a.gen + 1
        contexts = f"{len(ctx)} prompts from {os.path.basename(a.prompts)} + {a.gen} greedy tokens"
    else:
        g = torch.Generator(device=a.device).manual_seed(a.seed + 1)
        ids = torch.randint(0, vocab, (a.batch, a.seq), device=a.device, generator=g)
        ctx = (ids, torch.arange(a.seq, device=a.device)[None].expand(a.batch, -1))
        max_pos = max(a.seq, 256) + 1
        contexts = f"{a.batch} random sequences of {a.seq} tokens"
    model = DeepseekV3(cfg, sd, dtype, max_pos)

    rows = []
    for eps in [float(x) for x in a.eps.split(",")]:
        r = run_eps(model, orig, eps, a, ctx)
        rows.append(r)
        print(
            f"eps {eps:<5} agreement shifted {r['shifted']:.3f} aligned {r['aligned']:.3f} -> "
            f"accept length {r['accept_len_shifted']:.2f} (aligned {r['accept_len_aligned']:.2f}); "
            f"max |logit diff| aligned {r['max_abs_logit_diff_aligned']:.3g}",
            flush=True,
        )
    timing = time_forwards(model, vocab, a) if a.device == "cuda" else None
    print(f"\ncontexts: {contexts}; K = {a.k}\n")
    print(
        "| EPS | agreement (EAGLE shift) | accept length 1+p+p²+p³ | aligned agreement | aligned accept length |"
    )
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['eps']} | {r['shifted']:.3f} | {r['accept_len_shifted']:.2f} | "
            f"{r['aligned']:.3f} | {r['accept_len_aligned']:.2f} |"
        )
    if timing:
        print(
            f"\nforward of 8x256 tokens: target {timing['target_ms']:.1f} ms, NextN {timing['nextn_ms']:.1f} ms"
        )
    if a.json:
        args = {k: v for k, v in vars(a).items() if k != "json"}
        out = {
            "args": args,
            "dtype": str(dtype),
            "params": n_params,
            "contexts": contexts,
            "rows": rows,
            "timing": timing,
        }
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def time_forwards(model: DeepseekV3, vocab: int, a: argparse.Namespace) -> dict[str, Any]:
    ids = torch.randint(0, vocab, (8, 256), device=a.device)
    pos = torch.arange(256, device=a.device)[None].expand(8, -1)
    hidden = model.target(ids, pos)[1]

    def timed(fn: Callable[[], object], n: int = 5) -> float:
        fn()
        torch.cuda.synchronize()
        t = time.time()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.time() - t) / n * 1e3

    return {
        "target_ms": timed(lambda: model.target(ids, pos)),
        "nextn_ms": timed(lambda: model.nextn(ids, pos, hidden)),
    }


if __name__ == "__main__":
    main()
