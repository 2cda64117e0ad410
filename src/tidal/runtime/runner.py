"""The model runner: executes one :class:`~tidal.engine.plan.StepPlan` on the real model.

Inputs of a step, derived from the plan alone:

* a prefill chunk ``(req, c)`` computes tokens ``token_ids[s : s + c]`` at positions
  ``s … s + c − 1`` where ``s = req.num_computed_tokens`` (cached context: earlier chunks, or
  nothing after a preemption by recompute); the chunk samples a token iff it reaches the end of
  the request (``s + c = num_tokens``);
* a decode request (a member of the plan's decode pool, ``plan.decodes``) computes its last
  token, ``token_ids[c]`` at position ``c = pool.computed(req)``, attends ``c + 1`` tokens and
  samples.

A decode member with a draft in ``plan.spec_tokens`` (speculative decoding,
:mod:`tidal.runtime.spec_decode`) is verified instead: its last token and the ``m`` draft tokens
are fed as a chunk at positions ``c … c + m`` through the prefill path (causal attention over
the cached context, as vLLM verifies drafts), every row is sampled greedily, the drafts are
accepted while they equal the model's argmax, and the accepted drafts plus the model's token at
the first mismatch (or the bonus token after the last draft) are its tokens of the step. Its KV
at rejected positions stays in blocks that the scheduler takes back (overwritten later).

Every sampled token is appended to ``Request.token_ids`` (a verified request's tokens in order);
the scheduler's ``update`` then counts them, applies the stop rules and discards the tokens
after a request's ending. Block ids come from the block manager's tables
(:mod:`tidal.runtime.kv_cache`), grown for a decode member to ``⌈(c + 1) / block_size⌉``, the
blocks the pool charged for this step (a verified member: ``⌈(c + 1 + m) / block_size⌉``).
"""

from __future__ import annotations

import torch

from tidal.core.kv import KVBlockManager
from tidal.core.request import Request
from tidal.engine.decode_pool import DecodePool
from tidal.engine.plan import StepPlan
from tidal.runtime.attention import DecodeSegment, PrefillSegment
from tidal.runtime.kv_cache import PagedKVCache
from tidal.runtime.model import ForwardBatch, LlamaForCausalLM
from tidal.runtime.ngram import SpecDecodeStats
from tidal.runtime.sampling import GREEDY, SamplingParams, record_logprobs, sample

_SEED_MIX = 0x9E3779B97F4A7C15
_MASK63 = (1 << 63) - 1


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        cache: PagedKVCache,
        kv: KVBlockManager,
        device: torch.device,
        seed: int = 0,
    ) -> None:
        if not kv.track_ids:
            raise ValueError("the runner needs a KVBlockManager with track_ids=True")
        if kv.num_blocks != cache.num_blocks or kv.block_size != cache.block_size:
            raise ValueError("the KV tensors and the block manager disagree on the cache shape")
        self.model = model
        self.cache = cache
        self.kv = kv
        self.device = device
        self.seed = seed
        self.block_size = kv.block_size
        self._layers = [cache.layer(i) for i in range(model.config.num_layers)]
        self._params: dict[int, SamplingParams] = {}
        self._gens: dict[int, torch.Generator] = {}
        self.spec_stats = SpecDecodeStats()
        """Speculative decoding's counters (drafts verified, draft and accepted tokens)."""

    # ------------------------------------------------------------------ sampling state
    def set_sampling(self, req: Request, params: SamplingParams) -> None:
        self._params[req.request_id] = params
        if not params.greedy:
            seed = params.seed
            if seed is None:
                seed = ((self.seed + 1) * _SEED_MIX + req.request_id) & _MASK63
            self._gens[req.request_id] = torch.Generator().manual_seed(seed)

    def release(self, req: Request) -> None:
        """Forget a finished or aborted request's sampling state."""
        self._params.pop(req.request_id, None)
        self._gens.pop(req.request_id, None)

    # ------------------------------------------------------------------ step
    def can_speculate(self, req: Request) -> bool:
        """Whether ``req`` may be verified with a draft: plain greedy sampling only (no
        temperature — rejection sampling is not implemented —, logprobs or ``min_tokens``)."""
        return req.request_id not in self._params

    def run(self, plan: StepPlan) -> list[tuple[Request, int]]:
        """Execute ``plan``; returns the (request, sampled token) pairs in row order (a verified
        request contributes its accepted tokens, in order)."""
        batch, samplers = self.build(plan)
        logits = self.model(batch, self._layers)
        params = [self._params.get(r.request_id, GREEDY) for r in samplers]
        gens = [self._gens.get(r.request_id) for r in samplers]
        tokens = sample(logits, params, gens, [r.num_output_tokens for r in samplers])
        record_logprobs(logits, params, tokens)
        if not plan.spec_tokens:
            for req, tok in zip(samplers, tokens, strict=True):
                assert req.token_ids is not None
                req.token_ids.append(tok)
            return list(zip(samplers, tokens, strict=True))
        return self._accept(samplers, tokens, plan.spec_tokens)

    def _accept(
        self, samplers: list[Request], tokens: list[int], drafts: dict[int, list[int]]
    ) -> list[tuple[Request, int]]:
        """Greedy acceptance: a verified request's rows hold the argmax after its last token
        and after each draft token; drafts are kept while they equal it, then one more token."""
        out: list[tuple[Request, int]] = []
        i = 0
        while i < len(samplers):
            req = samplers[i]
            draft = drafts.get(req.request_id)
            if draft and req.in_pool:
                m = len(draft)
                got = tokens[i : i + m + 1]
                j = 0
                while j < m and got[j] == draft[j]:
                    j += 1
                self.spec_stats.observe(m, j)
                kept = got[: j + 1]
                i += m + 1
            else:
                kept = [tokens[i]]
                i += 1
            assert req.token_ids is not None
            req.token_ids.extend(kept)
            out.extend((req, t) for t in kept)
        return out

    def build(self, plan: StepPlan) -> tuple[ForwardBatch, list[Request]]:
        bs = self.block_size
        kv = self.kv
        ids: list[int] = []
        pos_parts: list[torch.Tensor] = []
        blk_parts: list[torch.Tensor] = []
        prefills: list[PrefillSegment] = []
        sample_rows: list[int] = []
        samplers: list[Request] = []
        row = 0
        prefill_chunks = len(plan.prefills)
        for req, n in plan.prefills:
            toks = req.token_ids
            if toks is None:
                raise RuntimeError(f"request {req.request_id} has no token ids")
            s = req.num_computed_tokens
            ctx = s + n
            blocks = torch.tensor(kv.block_table(req)[: -(-ctx // bs)], dtype=torch.long)
            pos = torch.arange(s, ctx, dtype=torch.long)
            ids.extend(toks[s:ctx])
            pos_parts.append(pos)
            blk_parts.append(blocks[pos // bs])
            prefills.append(PrefillSegment(row, n, ctx, blocks))
            row += n
            if ctx >= len(toks):
                sample_rows.append(row - 1)
                samplers.append(req)
        decode = None
        pool = plan.decodes
        if plan.num_decodes:
            assert pool is not None
            drafts = plan.spec_tokens or {}
            plain: list[Request] = []
            for req in pool.members.values():
                draft = drafts.get(req.request_id)
                if not draft:
                    plain.append(req)
                    continue
                c = pool.computed(req)
                toks = req.token_ids
                if toks is None or len(toks) != c + 1:
                    raise RuntimeError(f"request {req.request_id}: decode input out of sync")
                m = len(draft)
                ctx = c + 1 + m  # the last token and the draft, at positions c … c + m
                nb = -(-ctx // bs)  # lookahead blocks: charged by the scheduler for the step
                blocks = torch.tensor(kv.block_table(req, nb)[:nb], dtype=torch.long)
                pos = torch.arange(c, ctx, dtype=torch.long)
                ids.append(toks[c])
                ids.extend(draft)
                pos_parts.append(pos)
                blk_parts.append(blocks[pos // bs])
                prefills.append(PrefillSegment(row, m + 1, ctx, blocks))
                sample_rows.extend(range(row, row + m + 1))
                samplers.extend([req] * (m + 1))
                row += m + 1
            if len(plain) + len(prefills) - prefill_chunks != plan.num_decodes:
                raise RuntimeError("the decode pool changed between schedule and execute")
            if plain:
                decode = self._decode_rows(pool, plain, row, ids, pos_parts, blk_parts)
                sample_rows.extend(range(row, row + len(plain)))
                samplers.extend(plain)
                row += len(plain)
        dev = self.device
        positions = torch.cat(pos_parts) if len(pos_parts) > 1 else pos_parts[0]
        write_blocks = torch.cat(blk_parts) if len(blk_parts) > 1 else blk_parts[0]
        for p in prefills:
            p.blocks = p.blocks.to(dev)
        batch = ForwardBatch(
            torch.tensor(ids, dtype=torch.long, device=dev),
            positions.to(dev),
            write_blocks.to(dev),
            (positions % bs).to(dev),
            prefills,
            decode,
            torch.tensor(sample_rows, dtype=torch.long, device=dev),
        )
        return batch, samplers

    def _decode_rows(
        self,
        pool: DecodePool,
        members: list[Request],
        start: int,
        ids: list[int],
        pos_parts: list[torch.Tensor],
        blk_parts: list[torch.Tensor],
    ) -> DecodeSegment:
        """One row per decode member: its last token ``token_ids[c]`` at position ``c``."""
        bs, kv = self.block_size, self.kv
        d_pos: list[int] = []
        d_blk: list[int] = []
        flat: list[int] = []
        owner: list[int] = []
        last_fill: list[int] = []
        for i, req in enumerate(members):
            c = pool.computed(req)
            toks = req.token_ids
            if toks is None or len(toks) != c + 1:
                raise RuntimeError(f"request {req.request_id}: decode input out of sync")
            nb = c // bs + 1  # blocks holding positions 0 … c
            table = kv.block_table(req, nb)
            ids.append(toks[c])
            d_pos.append(c)
            d_blk.append(table[c // bs])
            flat.extend(table[:nb])
            owner.extend([i] * nb)
            last_fill.extend([bs] * (nb - 1))
            last_fill.append(c - (nb - 1) * bs + 1)
        pos_parts.append(torch.tensor(d_pos, dtype=torch.long))
        blk_parts.append(torch.tensor(d_blk, dtype=torch.long))
        fill = torch.tensor(last_fill, dtype=torch.long)
        invalid = torch.arange(bs, dtype=torch.long).unsqueeze(0) >= fill.unsqueeze(1)
        dev = self.device
        return DecodeSegment(
            start,
            len(members),
            torch.tensor(flat, dtype=torch.long, device=dev),
            torch.tensor(owner, dtype=torch.long, device=dev),
            invalid.to(dev),
        )
