"""The drop-in OpenAI/SGLang-compatible proxy: passthrough, mirror and split."""
