"""A BERT-style encoder run on its real tokens only, for the CPU graphs.

A request of texts is one [batch, width] tensor padded to its longest text: 32 STS-B sentences
carry 1.6 padded tokens per real one. The padded encoder computes every layer's projections and
feed-forward for the padding too; this one gathers the real tokens into one [tokens, hidden]
matrix for everything that works token by token (Q/K/V, the attention output, the feed-forward,
the LayerNorms) and scatters them back to [batch, width] only for the attention product, where
the mask already gives the padding a weight of exactly 0. Same weights, same ops per real token:
the outputs equal the padded encoder's within float rounding (the build checks cosine >= 0.9999).
Standard ONNX ops only (NonZero, CumSum, Gather), so any onnxruntime runs it; the GPU configs
keep the padded graph, where padding is cheap and TensorRT fuses attention.
"""

from __future__ import annotations

import math

import torch


def supports(config: dict) -> bool:
    """Encoders this module reproduces exactly (``config``: the model's config.json): post-LayerNorm
    BERT / XLM-R layers, absolute positions."""
    return (config.get("position_embedding_type", "absolute") == "absolute"
            and not config.get("is_decoder", False) and not config.get("add_cross_attention", False))


class PackedEncoder(torch.nn.Module):
    """``forward(input_ids, attention_mask, token_type_ids)`` -> last hidden state [batch, width,
    hidden] with zeros at padded positions, from a Hugging Face BertModel-like ``encoder`` (eager
    attention, eval mode)."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        if not supports(encoder.config.to_dict()):
            raise ValueError(f"{type(encoder).__name__}: no packed form for this configuration")
        self.encoder = encoder
        self.heads = encoder.config.num_attention_heads
        self.head_dim = encoder.config.hidden_size // self.heads

    def forward(self, input_ids, attention_mask, token_type_ids):
        batch, width = input_ids.shape
        x = self.encoder.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        hidden = x.shape[-1]
        flat = attention_mask.reshape(-1)
        keep = flat.unsqueeze(1).to(x.dtype)  # zeroes what a padded slot gathers
        real = torch.nonzero(flat).squeeze(1)  # the real tokens' slots, row by row
        slot = (torch.cumsum(flat, 0) - 1).clamp(min=0)  # each slot's row in the packed matrix

        def padded(t):  # [tokens, n] -> [batch * width, n], zeros at the padding
            return t.index_select(0, slot) * keep

        def split_heads(t):
            return padded(t).reshape(batch, width, self.heads, self.head_dim).transpose(1, 2)

        h = x.reshape(batch * width, hidden).index_select(0, real)
        bias = ((1.0 - attention_mask.to(x.dtype)) * torch.finfo(x.dtype).min)[:, None, None, :]
        for layer in self.encoder.encoder.layer:
            att = layer.attention.self
            q, k, v = split_heads(att.query(h)), split_heads(att.key(h)), split_heads(att.value(h))
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch * width, hidden).index_select(0, real)
            h = layer.attention.output.LayerNorm(layer.attention.output.dense(context) + h)
            h = layer.output.LayerNorm(layer.output.dense(layer.intermediate(h)) + h)
        return padded(h).reshape(batch, width, hidden)
