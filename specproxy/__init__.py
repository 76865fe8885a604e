"""specproxy: measure whether a speculative-decoding SGLang configuration makes your traffic faster."""

__version__ = "0.1.0"
