"""Hostile: does not parse."""

import torch
def count_block_parameters(d_model, n_heads, d_ff:
    return 0
