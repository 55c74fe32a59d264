"""Adversarial tests (issue 33): black-box attacks on a gateway configured only from TOML."""
