"""Peers of bench/moe_layer.py whose code is fetched and loaded at run time, never committed."""
