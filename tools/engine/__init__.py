"""The llama.cpp engine the engine tests (tests/engine/) run against: a real speculative
decoding server on a CPU, built and started by ``python -m tools.engine.llamacpp``
(``make engine``). Not part of the product: nothing under ``specproxy/`` imports it.
"""
