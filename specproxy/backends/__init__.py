"""Adapters: the only code that talks to model servers over HTTP."""
