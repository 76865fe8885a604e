"""Quantiles, distributions, and seeded bootstrap intervals over clusters."""
