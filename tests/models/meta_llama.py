"""A Llama written as Meta's reference code and its descendants write it (not through `transformers`):
rotary position embedding in complex numbers.

The rotation table is a complex buffer (`torch.polar` of the angles); queries and keys are viewed as
complex numbers (`view_as_complex` of their last dimension in pairs), multiplied by the table and
viewed back as reals (`view_as_real`). transformers' Llama rotates with real halves instead
(`rotate_half`), so the zoo's other decoders never put a complex tensor in a graph. The rest is the
usual decoder: RMSNorm, grouped-query attention with an explicit causal mask and an fp32 softmax,
SwiGLU feed-forward, untied output head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def rotation_table(head_dim: int, length: int, theta: float = 10000.0) -> torch.Tensor:
    """complex64 [length, head_dim // 2]: e^(i * position * theta^(-2j / head_dim))."""
    rates = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), rates)
    return torch.polar(torch.ones_like(angles), angles)


def rotate(q: torch.Tensor, k: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k: [batch, seq, heads, head_dim]; each consecutive pair of features is one complex number."""
    q_c = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    k_c = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    table = table.view(1, q_c.shape[1], 1, q_c.shape[-1])
    q_out = torch.view_as_real(q_c * table).flatten(3)
    k_out = torch.view_as_real(k_c * table).flatten(3)
    return q_out.type_as(q), k_out.type_as(k)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.kv_heads, self.head_dim)
        q, k = rotate(q, k, table)
        repeat = self.heads // self.kv_heads  # grouped-query attention: each kv head serves `repeat` q heads
        k = k[:, :, :, None, :].expand(batch, seq, self.kv_heads, repeat, self.head_dim).reshape(
            batch, seq, self.heads, self.head_dim)
        v = v[:, :, :, None, :].expand(batch, seq, self.kv_heads, repeat, self.head_dim).reshape(
            batch, seq, self.heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim) + mask
        weights = F.softmax(scores.float(), dim=-1).type_as(q)
        out = (weights @ v).transpose(1, 2).reshape(batch, seq, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.attention = Attention(dim, heads, kv_heads)
        self.feed_forward = FeedForward(dim, 2 * dim)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor, table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), table, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class MetaLlama(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, kv_heads: int, max_seq: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        # A plain attribute, as in the reference: `model.to(torch.bfloat16)` would cast a complex buffer to
        # a real dtype (dropping the imaginary part). The builder moves it to the model's device.
        self.freqs_cis = rotation_table(dim // heads, max_seq)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        table = self.freqs_cis[:seq]
        mask = torch.full((seq, seq), float("-inf"), device=tokens.device).triu(1).type_as(h)
        for layer in self.layers:
            h = layer(h, table, mask)
        return self.output(self.norm(h)).float()
