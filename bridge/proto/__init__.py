"""Generated from schemas/*.proto by scripts/gen_protos.py. Do not edit."""
