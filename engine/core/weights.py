"""How DecoderRunner lays out the HF model's weights: fused projections, and which dtype the matrices are kept in."""

from __future__ import annotations

import sys
from typing import Any

import torch


def fuse_layer(layer: Any, store: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One matmul for q/k/v and one for gate/up instead of five, with weights kept in `store`. The HF modules'
    weights are rebound as views of the fused tensors, so memory is not doubled."""
    attn, mlp = layer.self_attn, layer.mlp
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    w_qkv = torch.cat([p.weight.data for p in projections]).to(store)
    b_qkv = torch.cat([p.bias.data for p in projections]) if attn.q_proj.bias is not None else None
    offset = 0
    for p in projections:
        rows = p.weight.shape[0]
        p.weight.data = w_qkv[offset : offset + rows]
        if b_qkv is not None:
            p.bias.data = b_qkv[offset : offset + rows]
        offset += rows
    w_gate_up = torch.cat([mlp.gate_proj.weight.data, mlp.up_proj.weight.data]).to(store)
    for p in (attn.o_proj, mlp.down_proj):
        p.weight.data = p.weight.data.to(store)
    half = mlp.gate_proj.weight.shape[0]
    mlp.gate_proj.weight.data, mlp.up_proj.weight.data = w_gate_up[:half], w_gate_up[half:]
    return w_qkv, b_qkv, w_gate_up


def bf16_exact(model: Any) -> bool:
    """True when every matrix of the model's linear layers and embeddings is exactly representable in bf16 (a
    checkpoint stored in bf16 and loaded in float32), so keeping them in bf16 loses nothing."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            w = m.weight.data
            if w.dtype != torch.bfloat16 and not _bf16_exact(w):
                return False
    return True


def _bf16_exact(w: torch.Tensor) -> bool:
    """A float32 matrix is exact in bf16 when the low 16 bits of every value are zero: read in place (a third of
    the CPU time of the round trip below, which allocates two copies, at every start). A NaN counts as exact
    there, and stays a NaN in bf16."""
    if w.dtype == torch.float32 and w.is_contiguous() and w.device.type == "cpu" and sys.byteorder == "little":
        return not bool(w.view(torch.int16)[..., 0::2].any())
    return torch.equal(w.to(torch.bfloat16).to(w.dtype), w)


def widen_vectors(model: Any) -> None:
    """Every parameter and buffer but the matrices of linear layers and embeddings to float32 (norm weights,
    biases), in place: the bf16 model's float32 forward on the CPU kernels."""
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))}
    for p in model.parameters():
        if id(p) not in matrices and p.dtype == torch.bfloat16:
            p.data = p.data.float()
    for m in model.modules():
        for name, buf in m.named_buffers(recurse=False):
            if buf is not None and buf.dtype == torch.bfloat16:
                setattr(m, name, buf.float())
