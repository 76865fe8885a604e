"""The simulated SGLang server used by the tests and the demo; everything it says is SIMULATED."""
