# (a GPU-host script: it prints its result as one JSON line)
"""Build the testbed pair on the GPU: a production-shaped random Llama target and its first-K-layers draft.

usage: python3 build_pair.py OUT_DIR TOKENIZER_DIR [--k 2] [--eps 0.05] [--seed 0]

  OUT_DIR/target  LlamaForCausalLM, bf16: hidden 4096, 32 layers, 32 heads (8 KV heads),
                  MLP 11008, the GPU kit's 4096-token vocabulary; about 5.7B parameters, 11 GB.
                  Every layer from K on has its residual writes (self_attn.o_proj and
                  mlp.down_proj) scaled by EPS, so it still costs the full compute of 32 layers
                  but moves the residual stream only a little.
  OUT_DIR/draft   the target's first K layers with the same embedding, final norm and LM head:
                  a STANDALONE draft whose greedy agreement with the target falls as EPS grows.

The weights are drawn on the GPU (seconds, not minutes on the CPU). The same recipe as the kit's
testbed_probe.sh and draft_probe.py (seed 0), so K=2, EPS=0.05 is the pair measured there.
A pair already built with the same K, EPS and seed is kept. Prints one JSON line with the sizes
and the build time.
"""

import argparse
import json
import os
import shutil
import time
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)


def target_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=4096,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )


def build(out: str, tok: str, k: int, eps: float, seed: int) -> dict[str, Any]:
    t0 = time.time()
    torch.manual_seed(seed)
    cfg = target_config()
    with torch.device("cuda"):
        target = LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for i, layer in enumerate(target.model.layers):
            if i >= k:
                layer.self_attn.o_proj.weight.mul_(eps)
                layer.mlp.down_proj.weight.mul_(eps)
    target.config.torch_dtype = torch.bfloat16
    target.save_pretrained(os.path.join(out, "target"), safe_serialization=True)
    dcfg = LlamaConfig(**{**cfg.to_dict(), "num_hidden_layers": k})
    with torch.device("cuda"):
        draft = LlamaForCausalLM(dcfg).to(torch.bfloat16)
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        draft.model.norm.weight.copy_(target.model.norm.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        for i in range(k):
            draft.model.layers[i].load_state_dict(target.model.layers[i].state_dict())
    draft.config.torch_dtype = torch.bfloat16
    draft.save_pretrained(os.path.join(out, "draft"), safe_serialization=True)
    for sub in ("target", "draft"):
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(tok, name)):
                shutil.copy(os.path.join(tok, name), os.path.join(out, sub, name))
    return {
        "k": k,
        "eps": eps,
        "seed": seed,
        "build_s": round(time.time() - t0, 1),
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("tokenizer_dir")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not 1 <= a.k < 32:
        ap.error("--k must be between 1 and 31")
    if not 0 <= a.eps <= 1:
        ap.error("--eps must be between 0 and 1")
    stamp = os.path.join(a.out_dir, "pair.json")
    want = {"k": a.k, "eps": a.eps, "seed": a.seed}
    if os.path.isfile(stamp):
        with open(stamp) as f:
            have = json.load(f)
        if {key: have.get(key) for key in want} == want:
            print(json.dumps({**have, "reused": True}))
            return
    shutil.rmtree(a.out_dir, ignore_errors=True)
    os.makedirs(a.out_dir)
    info = build(a.out_dir, a.tokenizer_dir, a.k, a.eps, a.seed)
    with open(stamp, "w") as f:
        json.dump(info, f)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
