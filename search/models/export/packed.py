"""Encoders run on their real tokens only, for the CPU graphs.

A request is one [batch, width] tensor padded to its longest text, and a padded encoder computes
projections and feed-forward for the padding too. These gather the real tokens into one [tokens,
hidden] matrix for all token-wise work and scatter back to [batch, width] only for the attention
product, where the mask already zeroes padding. Outputs equal the padded encoder's within rounding
(the build checks). Standard ONNX ops only; the GPU configs keep the padded graph (TensorRT fuses
attention).

- ``PackedEncoder``: a BERT-style encoder, post-LayerNorm, all tokens out.
- ``PackedCausalText``: a dual encoder's causal, pre-LayerNorm text tower (transformers), pooled at
  the end token, so only that token needs the last layer's query, output and feed-forward."""

from __future__ import annotations

import math

import torch


class Packing:
    """Where a [batch, width] mask's real tokens sit, row by row."""

    def __init__(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> None:
        flat = attention_mask.reshape(-1)
        self.keep = flat.unsqueeze(1).to(dtype)  # zeroes what a padded slot gathers
        self.real = torch.nonzero(flat).squeeze(1)  # the real tokens' slots
        self.slot = (torch.cumsum(flat, 0) - 1).clamp(min=0)  # each slot's row in the packed matrix

    def packed(self, t: torch.Tensor) -> torch.Tensor:
        """[batch * width, n] -> [tokens, n]"""
        return t.index_select(0, self.real)

    def padded(self, t: torch.Tensor) -> torch.Tensor:
        """[tokens, n] -> [batch * width, n], zeros at the padding"""
        return t.index_select(0, self.slot) * self.keep


def supports(config: dict) -> bool:
    """Encoders ``PackedEncoder`` reproduces exactly (``config``: the model's config.json): post-LayerNorm
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
        p = Packing(attention_mask, x.dtype)

        def split_heads(t):
            return p.padded(t).reshape(batch, width, self.heads, self.head_dim).transpose(1, 2)

        h = p.packed(x.reshape(batch * width, hidden))
        bias = ((1.0 - attention_mask.to(x.dtype)) * torch.finfo(x.dtype).min)[:, None, None, :]
        for layer in self.encoder.encoder.layer:
            att = layer.attention.self
            q, k, v = split_heads(att.query(h)), split_heads(att.key(h)), split_heads(att.value(h))
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
            context = p.packed((scores.softmax(-1) @ v).transpose(1, 2).reshape(batch * width, hidden))
            h = layer.attention.output.LayerNorm(layer.attention.output.dense(context) + h)
            h = layer.output.LayerNorm(layer.output.dense(layer.intermediate(h)) + h)
        return p.padded(h).reshape(batch, width, hidden)


class PackedCausalText(torch.nn.Module):
    """``forward(input_ids, attention_mask)`` -> the unit text vectors [batch, D] of a transformers
    ``CLIPModel`` (eval mode), pooled as the model pools: at argmax(input_ids) where ``pooling`` is
    "argmax" (configs with eos_token_id 2), else at the first ``eos_id``. Texts are padded at the end,
    as the tokenizer step pads them."""

    def __init__(self, model: torch.nn.Module, pooling: str, eos_id: int) -> None:
        super().__init__()
        self.text, self.projection = model.text_model, model.text_projection
        self.pooling, self.eos_id = pooling, eos_id
        cfg = model.config.text_config
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads

    def forward(self, input_ids, attention_mask):
        batch, width = input_ids.shape
        x = self.text.embeddings(input_ids=input_ids)
        hidden = x.shape[-1]
        p = Packing(attention_mask, x.dtype)
        ids = input_ids.to(torch.int)
        at = ids.argmax(-1) if self.pooling == "argmax" else (ids == self.eos_id).int().argmax(-1)
        pooled = p.slot.index_select(0, torch.arange(batch) * width + at)  # the pooled tokens' packed rows
        i = torch.arange(width)
        causal = torch.zeros(width, width, dtype=x.dtype).masked_fill(i[None, :] > i[:, None], torch.finfo(x.dtype).min)

        def split_heads(t, rows):
            return t.reshape(batch, rows, self.heads, self.head_dim).transpose(1, 2)

        def context(att, q, a, mask):  # q: [batch, rows, hidden]; a: the layer's packed input -> [batch * rows, hidden]
            k, v = (split_heads(p.padded(proj(a)), width) for proj in (att.k_proj, att.v_proj))
            scores = (split_heads(q, q.shape[1]) @ k.transpose(-1, -2)) * att.scale + mask
            return (scores.softmax(-1) @ v).transpose(1, 2).reshape(-1, hidden)

        h = p.packed(x.reshape(batch * width, hidden))
        *layers, last = self.text.encoder.layers
        for layer in layers:
            att, a = layer.self_attn, layer.layer_norm1(h)
            q = p.padded(att.q_proj(a)).reshape(batch, width, hidden)
            h = h + att.out_proj(p.packed(context(att, q, a, causal)))
            h = h + layer.mlp(layer.layer_norm2(h))
        att, a = last.self_attn, last.layer_norm1(h)
        q = att.q_proj(a.index_select(0, pooled)).reshape(batch, 1, hidden)
        h = h.index_select(0, pooled) + att.out_proj(context(att, q, a, causal.index_select(0, at)[:, None, None, :]))
        h = h + last.mlp(last.layer_norm2(h))
        return torch.nn.functional.normalize(self.projection(self.text.final_layer_norm(h)), p=2, dim=-1)
