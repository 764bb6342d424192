#!/usr/bin/env python3
"""Synthetic GPU allocation traces in the `shared/traces` CSV format.

Each workload is a small model of what PyTorch asks its CUDA caching allocator for while
running a real job: the tensors a forward pass creates and which of them autograd saves,
the order backward frees saved tensors and creates gradients, AMP weight casts, lazily
created optimizer state, foreach-optimizer temporaries, cuDNN workspaces, KV caches, and
so on. Sizes are element counts from the model shapes times element sizes (fp32 = 4,
bf16/fp16 = 2, bool = 1, int64 = 8), unrounded, as the program would request them.

Output format (one file per workload):

    action,id,size,stream
    alloc,<id>,<bytes>,0
    free,<id>,<bytes>,0

Ids are fake addresses, unique among live allocations and reused after a free (most
recently freed first), as PyTorch's addresses are. Tensors still live at the end (weights,
optimizer state, caches) have no free row. Every workload has its own fixed seed, so the
output is reproducible byte for byte.

Usage:
    python3 tools/synth_traces.py OUT_DIR            # every workload
    python3 tools/synth_traces.py OUT_DIR NAME ...   # some of them
    python3 tools/synth_traces.py --list
    python3 tools/synth_traces.py --seed-offset K OUT_DIR ...   # a variant with other seeds

Standard library only.
"""

import math
import os
import random
import sys

FP32 = 4
BF16 = 2
FP16 = 2
BOOL = 1
I64 = 8
I32 = 4

GIB = 1 << 30
MIB = 1 << 20


# --------------------------------------------------------------------------------------
# Trace recording
# --------------------------------------------------------------------------------------


class Handle:
    __slots__ = ("id", "size", "refs")

    def __init__(self, id_, size, refs):
        self.id = id_
        self.size = size
        self.refs = refs


class Trace:
    """Records allocations and frees. `a` allocates, `f` drops one reference."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = random.Random(seed)
        self.rows = []
        self.free_ids = []
        self.next_id = 0
        self.live = 0
        self.peak = 0
        self.nlive = 0
        self.notes = {}  # workload facts printed with the summary

    def a(self, nbytes, refs=1):
        nbytes = int(nbytes)
        if nbytes <= 0:
            return None
        if self.free_ids:
            id_ = self.free_ids.pop()
        else:
            id_ = 139_600_000_000_000 + self.next_id * 512
            self.next_id += 1
        self.rows.append(("alloc", id_, nbytes))
        self.live += nbytes
        self.nlive += 1
        self.peak = max(self.peak, self.live)
        return Handle(id_, nbytes, refs)

    def f(self, *handles):
        for h in handles:
            if h is None:
                continue
            if isinstance(h, (list, tuple)):
                self.f(*h)
                continue
            assert h.refs > 0, "double free"
            h.refs -= 1
            if h.refs == 0:
                self.rows.append(("free", h.id, h.size))
                self.free_ids.append(h.id)
                self.live -= h.size
                self.nlive -= 1

    def ref(self, h, n=1):
        if h is not None:
            h.refs += n
        return h

    def write(self, path):
        with open(path, "w") as out:
            out.write("action,id,size,stream\n")
            out.writelines(f"{a},{i},{s},0\n" for a, i, s in self.rows)


# --------------------------------------------------------------------------------------
# Transformer training
# --------------------------------------------------------------------------------------


class TConf:
    """A decoder-only transformer and how it is trained."""

    def __init__(self, **kw):
        self.layers = 12
        self.d = 768
        self.heads = 12
        self.kv_heads = None  # None: same as heads
        self.ff = 3072
        self.vocab = 50257
        self.mlp = "gelu"  # or "swiglu"
        self.norm = "ln"  # or "rms"
        self.bias = True
        self.rope = False
        self.pos_emb = True  # learned positional embedding (GPT-2)
        self.max_pos = 1024
        self.tied = True
        self.param_bytes = FP32
        self.amp = False  # autocast to bf16 with fp32 params
        self.attn = "flash"  # or "math" (scores materialised)
        self.dropout = False
        self.ckpt = False  # activation checkpointing per layer
        self.accum = 1  # micro-batches per optimizer step
        self.steps = 6
        self.optimizer = "adamw_foreach"  # or "adamw_fused"
        self.state_bytes = FP32
        self.clip = True
        self.keep_logits = False  # HF outputs hold the logits until the step ends
        self.shapes = lambda step, micro, rng: (8, 512)
        for k, v in kw.items():
            assert hasattr(self, k), k
            setattr(self, k, v)
        if self.kv_heads is None:
            self.kv_heads = self.heads
        self.hd = self.d // self.heads
        self.kvd = self.kv_heads * self.hd
        # Compute dtype of matmuls and of the residual stream.
        self.ab = BF16 if self.amp else self.param_bytes
        self.rb = FP32 if self.amp else self.param_bytes


class TransformerTrainer:
    def __init__(self, tr, c):
        self.tr = tr
        self.c = c
        self.params = {}  # name -> (handle, numel)
        self.order = []
        self.grads = {}
        self.state = None
        self.casts = {}  # autocast weight-cast cache for the current forward
        self.build()

    # ---- parameters -------------------------------------------------------------------
    def p(self, name, numel):
        self.params[name] = (self.tr.a(numel * self.c.param_bytes), numel)
        self.order.append(name)

    def build(self):
        c = self.c
        self.p("wte", c.vocab * c.d)
        if c.pos_emb:
            self.p("wpe", c.max_pos * c.d)
        for L in range(c.layers):
            self.p(f"{L}.n1.w", c.d)
            if c.norm == "ln":
                self.p(f"{L}.n1.b", c.d)
            self.p(f"{L}.qkv.w", c.d * (c.d + 2 * c.kvd))
            if c.bias:
                self.p(f"{L}.qkv.b", c.d + 2 * c.kvd)
            self.p(f"{L}.o.w", c.d * c.d)
            if c.bias:
                self.p(f"{L}.o.b", c.d)
            self.p(f"{L}.n2.w", c.d)
            if c.norm == "ln":
                self.p(f"{L}.n2.b", c.d)
            if c.mlp == "swiglu":
                self.p(f"{L}.gate.w", c.d * c.ff)
                self.p(f"{L}.up.w", c.d * c.ff)
            else:
                self.p(f"{L}.up.w", c.d * c.ff)
                if c.bias:
                    self.p(f"{L}.up.b", c.ff)
            self.p(f"{L}.down.w", c.ff * c.d)
            if c.bias:
                self.p(f"{L}.down.b", c.d)
        self.p("nf.w", c.d)
        if c.norm == "ln":
            self.p("nf.b", c.d)
        if not c.tied:
            self.p("head.w", c.vocab * c.d)
        if c.rope:
            # cos/sin cache buffers (fp32)
            self.rope_cache = [self.tr.a(c.max_pos * c.hd * FP32) for _ in range(2)]

    def numel(self, name):
        return self.params[name][1]

    # ---- helpers ----------------------------------------------------------------------
    def wcast(self, name):
        """The bf16 copy autocast makes of an fp32 weight (cached for this forward)."""
        if not self.c.amp:
            return None
        h = self.casts.get(name)
        if h is None:
            h = self.tr.a(self.numel(name) * BF16, refs=1)
            self.casts[name] = h
        self.tr.ref(h)  # the op that uses it saves it
        return h

    def end_forward(self):
        # Leaving the autocast region drops the cache's own references.
        for h in self.casts.values():
            self.tr.f(h)
        self.casts = {}

    def wgrad(self, name):
        """A weight gradient arrives at AccumulateGrad."""
        tr, c = self.tr, self.c
        n = self.numel(name)
        if c.amp:
            g16 = tr.a(n * BF16)
            g = tr.a(n * FP32)  # ToCopyBackward of the autocast cast
            tr.f(g16)
        else:
            g = tr.a(n * c.param_bytes)
        if self.grads.get(name) is None:
            self.grads[name] = g  # stolen
        else:
            tr.f(g)  # .grad += g, then g dies

    def bgrad(self, name):
        if name in self.params:
            self.wgrad(name)

    # ---- forward ----------------------------------------------------------------------
    def layer_fwd(self, L, x, b, s, save):
        """One block. `x` is the residual-stream input (already live). Returns output and
        the saved context. With save=False (checkpointed forward) nothing is kept."""
        tr, c = self.tr, self.c
        T = b * s
        ctx = {}

        pending = []

        def keep(name, h):
            if save:
                ctx[name] = h
            else:
                pending.append(h)  # dies once its consumer has produced its output

        def A(nbytes):
            h = tr.a(nbytes)
            while pending:
                tr.f(pending.pop())
            return h

        # --- attention half
        n1 = A(T * c.d * (FP32 if c.amp else c.ab))  # norms run in fp32 under autocast
        st1 = [A(T * FP32) for _ in range(1 if c.norm == "rms" else 2)]
        keep("st1", st1)
        if c.amp:
            n1c = A(T * c.d * BF16)
            tr.f(n1)
            n1 = n1c
        keep("n1", n1)
        keep("wqkv", self.wcast(f"{L}.qkv.w"))
        if c.bias:
            tr.f(self.wcast(f"{L}.qkv.b"))
        qkv = A(T * (c.d + 2 * c.kvd) * c.ab)
        if c.rope:
            q = A(T * c.d * c.ab)
            k = A(T * c.kvd * c.ab)
            v = A(T * c.kvd * c.ab)  # transpose(1, 2).contiguous()
            tr.f(qkv)
        else:
            q, k, v = qkv, tr.ref(qkv), tr.ref(qkv)  # views
        if c.attn == "flash":
            out = A(T * c.d * c.ab)
            lse = A(b * c.heads * s * FP32)
            rng = A(16) if c.dropout else None
            keep("qkv", [q, k, v])
            keep("attn_out", tr.ref(out))
            keep("lse", [lse, rng])
        else:
            sc = A(b * c.heads * s * s * c.ab)  # q @ k^T
            sc2 = A(b * c.heads * s * s * c.ab)  # / sqrt(d)
            tr.f(sc)
            sc3 = A(b * c.heads * s * s * c.ab)  # masked_fill / + mask
            tr.f(sc2)
            if c.amp:
                pr = A(b * c.heads * s * s * FP32)  # softmax runs in fp32
                tr.f(sc3)
                prc = A(b * c.heads * s * s * BF16)
                keep("probs", pr)
                pr = prc
            else:
                pr = A(b * c.heads * s * s * c.ab)
                tr.f(sc3)
                keep("probs", tr.ref(pr))
            if c.dropout:
                m = A(b * c.heads * s * s * BOOL)
                dp = A(b * c.heads * s * s * c.ab)
                keep("pmask", m)
                tr.f(pr)
                pr = dp
            keep("pv", pr)  # saved by probs @ v
            keep("qkv", [q, k, v])
            o4 = A(T * c.d * c.ab)
            out = A(T * c.d * c.ab)  # merge heads: transpose + contiguous
            tr.f(o4)
        keep("attn_in_o", out)  # saved by the output projection
        keep("wo", self.wcast(f"{L}.o.w"))
        if c.bias:
            tr.f(self.wcast(f"{L}.o.b"))
        o = A(T * c.d * c.ab)
        if c.dropout:
            m = A(T * c.d * BOOL)
            od = A(T * c.d * c.ab)
            keep("omask", m)
            tr.f(o)
            o = od
        x2 = A(T * c.d * c.rb)
        tr.f(o)
        keep("x2", tr.ref(x2))  # saved by norm 2

        # --- MLP half
        n2 = A(T * c.d * (FP32 if c.amp else c.ab))
        st2 = [A(T * FP32) for _ in range(1 if c.norm == "rms" else 2)]
        keep("st2", st2)
        if c.amp:
            n2c = A(T * c.d * BF16)
            tr.f(n2)
            n2 = n2c
        if c.mlp == "swiglu":
            keep("n2", tr.ref(n2))
            keep("wg", self.wcast(f"{L}.gate.w"))
            gate = A(T * c.ff * c.ab)
            keep("wu", self.wcast(f"{L}.up.w"))
            up = A(T * c.ff * c.ab)
            tr.f(n2)
            act = A(T * c.ff * c.ab)  # silu(gate)
            prod = A(T * c.ff * c.ab)  # act * up
            keep("gate", gate)
            keep("up", up)
            keep("act", act)
            keep("prod", prod)  # saved by down proj
        else:
            keep("n2", n2)
            keep("wu", self.wcast(f"{L}.up.w"))
            if c.bias:
                tr.f(self.wcast(f"{L}.up.b"))
            f1 = A(T * c.ff * c.ab)
            g = A(T * c.ff * c.ab)  # gelu
            keep("f1", f1)
            keep("prod", g)
        keep("wd", self.wcast(f"{L}.down.w"))
        if c.bias:
            tr.f(self.wcast(f"{L}.down.b"))
        f2 = A(T * c.d * c.ab)
        if c.dropout:
            m = A(T * c.d * BOOL)
            fd = A(T * c.d * c.ab)
            keep("fmask", m)
            tr.f(f2)
            f2 = fd
        x3 = A(T * c.d * c.rb)
        tr.f(f2)
        tr.f(x2)  # the forward's own reference
        tr.f(pending)
        return x3, ctx

    def layer_bwd(self, L, g, ctx, x, b, s):
        """Backward of one block; `g` is the grad of its output, `x` its input (freed here,
        as LN1's saved input). Returns the grad of the input."""
        tr, c = self.tr, self.c
        T = b * s
        # residual: g flows to the MLP branch and the skip unchanged
        gb = tr.a(T * c.d * c.ab) if c.amp else tr.ref(g)  # cast to the branch dtype
        if c.dropout:
            gd = tr.a(T * c.d * c.ab)
            tr.f(gb, ctx.pop("fmask"))
            gb = gd
        gp = tr.a(T * c.ff * c.ab)  # grad wrt down-proj input
        self.wgrad(f"{L}.down.w")
        if c.bias:
            self.bgrad(f"{L}.down.b")
        tr.f(gb, ctx.pop("prod"), ctx.pop("wd"))
        if c.mlp == "swiglu":
            ga = tr.a(T * c.ff * c.ab)
            gu = tr.a(T * c.ff * c.ab)
            tr.f(gp, ctx.pop("act"))
            gg = tr.a(T * c.ff * c.ab)  # silu backward
            tr.f(ga, ctx.pop("gate"))
            gn_u = tr.a(T * c.d * c.ab)
            self.wgrad(f"{L}.up.w")
            tr.f(gu, ctx.pop("up"), ctx.pop("wu"))
            gn_g = tr.a(T * c.d * c.ab)
            self.wgrad(f"{L}.gate.w")
            tr.f(gg, ctx.pop("wg"))
            gn = tr.a(T * c.d * c.ab)
            tr.f(gn_u, gn_g, ctx.pop("n2"))
        else:
            gf = tr.a(T * c.ff * c.ab)  # gelu backward
            tr.f(gp, ctx.pop("f1"))
            gn = tr.a(T * c.d * c.ab)
            self.wgrad(f"{L}.up.w")
            if c.bias:
                self.bgrad(f"{L}.up.b")
            tr.f(gf, ctx.pop("n2"), ctx.pop("wu"))
        if c.amp:
            g32 = tr.a(T * c.d * FP32)
            tr.f(gn)
            gn = g32
        gx2 = tr.a(T * c.d * c.rb)  # norm 2 backward
        self.wgrad(f"{L}.n2.w")
        self.bgrad(f"{L}.n2.b")
        tr.f(gn, ctx.pop("st2"), ctx.pop("x2"))
        g2 = tr.a(T * c.d * c.rb)  # sum of skip and branch grads
        tr.f(g, gx2)

        # attention half
        gb = tr.a(T * c.d * c.ab) if c.amp else tr.ref(g2)
        if c.dropout:
            gd = tr.a(T * c.d * c.ab)
            tr.f(gb, ctx.pop("omask"))
            gb = gd
        gao = tr.a(T * c.d * c.ab)
        self.wgrad(f"{L}.o.w")
        if c.bias:
            self.bgrad(f"{L}.o.b")
        tr.f(gb, ctx.pop("attn_in_o"), ctx.pop("wo"))
        if c.attn == "flash":
            gq = tr.a(T * c.d * c.ab)
            gk = tr.a(T * c.kvd * c.ab)
            gv = tr.a(T * c.kvd * c.ab)
            acc = tr.a(b * c.heads * s * c.hd * FP32)  # dq accumulator
            dsum = tr.a(b * c.heads * s * FP32)
            tr.f(acc, dsum, gao, ctx.pop("attn_out"), ctx.pop("lse"))
        else:
            go4 = tr.a(T * c.d * c.ab)  # un-merge heads
            tr.f(gao)
            gpr = tr.a(b * c.heads * s * s * c.ab)  # grad wrt probs
            gv = tr.a(T * c.kvd * c.ab)
            tr.f(go4, ctx.pop("pv"))
            if c.dropout:
                gpd = tr.a(b * c.heads * s * s * c.ab)
                tr.f(gpr, ctx.pop("pmask"))
                gpr = gpd
            if c.amp:
                g32 = tr.a(b * c.heads * s * s * FP32)
                tr.f(gpr)
                gpr = g32
            gsc = tr.a(b * c.heads * s * s * (FP32 if c.amp else c.ab))  # softmax bwd
            tr.f(gpr, ctx.pop("probs"))
            if c.amp:
                g16 = tr.a(b * c.heads * s * s * BF16)
                tr.f(gsc)
                gsc = g16
            gsc2 = tr.a(b * c.heads * s * s * c.ab)  # / sqrt(d) backward
            tr.f(gsc)
            gq = tr.a(T * c.d * c.ab)
            gk = tr.a(T * c.kvd * c.ab)
            tr.f(gsc2)
        qkv = ctx.pop("qkv")
        if c.rope:
            gq2 = tr.a(T * c.d * c.ab)
            gk2 = tr.a(T * c.kvd * c.ab)
            tr.f(gq, gk)
            gq, gk = gq2, gk2
        gqkv = tr.a(T * (c.d + 2 * c.kvd) * c.ab)  # cat / strided write into one buffer
        tr.f(gq, gk, gv, qkv)
        gn = tr.a(T * c.d * c.ab)
        self.wgrad(f"{L}.qkv.w")
        if c.bias:
            self.bgrad(f"{L}.qkv.b")
        tr.f(gqkv, ctx.pop("n1"), ctx.pop("wqkv"))
        if c.amp:
            g32 = tr.a(T * c.d * FP32)
            tr.f(gn)
            gn = g32
        gx = tr.a(T * c.d * c.rb)
        self.wgrad(f"{L}.n1.w")
        self.bgrad(f"{L}.n1.b")
        tr.f(gn, ctx.pop("st1"), x)
        g1 = tr.a(T * c.d * c.rb)
        tr.f(g2, gx)
        assert not ctx, ctx.keys()
        return g1

    # ---- one micro-batch --------------------------------------------------------------
    def micro(self, b, s):
        tr, c = self.tr, self.c
        T = b * s
        ids = tr.a(T * I64)
        labels = tr.a(T * I64)
        mask = tr.a(T * I64)
        pos = tr.a(T * I64) if (c.pos_emb or c.rope) else None
        causal = tr.a(b * s * s * c.ab) if c.attn == "math" and c.rope else None  # 4D mask
        # embedding
        e = tr.a(T * c.d * c.param_bytes)
        if c.pos_emb:
            pe = tr.a(T * c.d * c.param_bytes)
            x = tr.a(T * c.d * c.param_bytes)
            tr.f(e, pe)
        else:
            x = e
        if c.dropout:
            m = tr.a(T * c.d * BOOL)
            xd = tr.a(T * c.d * c.param_bytes)
            tr.f(x)
            x, emask = xd, m
        else:
            emask = None
        inputs = []
        ctxs = []
        for L in range(c.layers):
            inputs.append(x)
            if c.ckpt:
                tr.ref(x)  # held by the checkpoint
                y, ctx = self.layer_fwd(L, x, b, s, save=False)
                # x stays saved by the checkpoint; the forward's ref drops
                tr.f(x)
            else:
                y, ctx = self.layer_fwd(L, x, b, s, save=True)
            ctxs.append(ctx)
            x = y
        # final norm + head + loss
        nf = tr.a(T * c.d * (FP32 if c.amp else c.ab))
        stf = [tr.a(T * FP32) for _ in range(1 if c.norm == "rms" else 2)]
        if c.amp:
            nfc = tr.a(T * c.d * BF16)
            tr.f(nf)
            nf = nfc
        head = "wte" if c.tied else "head.w"
        wh = self.wcast(head)
        logits = tr.a(T * c.vocab * c.ab)
        if c.amp or c.ab != FP32:
            l32 = tr.a(T * c.vocab * FP32)  # .float() / autocast fp32 for cross_entropy
            if not c.keep_logits:
                tr.f(logits)
                logits = None
        else:
            l32 = logits
            logits = tr.ref(logits) if c.keep_logits else None
        # shift_logits = logits[..., :-1, :].contiguous() (HF)
        sh = tr.a(b * (s - 1) * c.vocab * FP32)
        tr.f(l32)
        lsm = tr.a(b * (s - 1) * c.vocab * FP32)  # log_softmax, saved
        tr.f(sh)
        loss = tr.a(FP32)
        tw = tr.a(FP32)
        self.end_forward()
        # backward
        g0 = tr.a(FP32)
        gl = tr.a(b * (s - 1) * c.vocab * FP32)  # nll backward
        gs = tr.a(b * (s - 1) * c.vocab * FP32)  # log_softmax backward
        tr.f(gl, lsm, tw)
        gfull = tr.a(T * c.vocab * FP32)  # un-shift (zeros + slice copy)
        tr.f(gs)
        if c.amp or c.ab != FP32:
            g16 = tr.a(T * c.vocab * c.ab)
            tr.f(gfull)
            gfull = g16
        gh = tr.a(T * c.d * c.ab)
        self.wgrad(head)
        tr.f(gfull, nf, wh)
        if c.amp:
            g32 = tr.a(T * c.d * FP32)
            tr.f(gh)
            gh = g32
        g = tr.a(T * c.d * c.rb)
        self.wgrad("nf.w")
        self.bgrad("nf.b")
        tr.f(gh, stf, x)
        for L in reversed(range(c.layers)):
            xin = inputs[L]
            if c.ckpt:
                # recompute the block with grad enabled, then run its backward
                self.casts = {}
                tr.ref(xin)
                y, ctx = self.layer_fwd(L, xin, b, s, save=True)
                tr.f(y)  # the recomputed output is not needed
                self.end_forward()
                tr.f(xin)  # recompute's own reference; checkpoint still holds one
                g = self.layer_bwd(L, g, ctx, xin, b, s)
            else:
                g = self.layer_bwd(L, g, ctxs[L], xin, b, s)
        if c.dropout:
            gd = tr.a(T * c.d * c.param_bytes)
            tr.f(g, emask)
            g = gd
        # embedding backward: dense grad of the table, plus index sort temporaries
        srt = [tr.a(T * I64) for _ in range(3)]
        self.grads_embed(g, T)
        tr.f(srt)
        if c.pos_emb:
            self.wgrad("wpe")
        tr.f(g, g0, loss, ids, labels, mask, pos, causal, logits)

    def grads_embed(self, g, T):
        tr, c = self.tr, self.c
        n = self.numel("wte")
        gw = tr.a(n * c.param_bytes)
        if self.grads.get("wte") is None:
            self.grads["wte"] = gw
        else:
            tr.f(gw)

    # ---- optimizer --------------------------------------------------------------------
    def opt_step(self):
        tr, c = self.tr, self.c
        names = [n for n in self.order if self.grads.get(n) is not None]
        if c.clip:
            norms = [tr.a(FP32) for _ in names]  # _foreach_norm
            stk = tr.a(len(names) * FP32)
            tot = tr.a(FP32)
            tr.f(norms, stk)
            coef = tr.a(FP32)
            cl = tr.a(FP32)
            tr.f(tot, coef, cl)
        if self.state is None:
            self.state = {}
            for n in names:  # lazy state init, param by param
                numel = self.numel(n)
                if c.optimizer == "adamw_fused":
                    step = tr.a(FP32)
                else:
                    step = None
                self.state[n] = (
                    tr.a(numel * c.state_bytes),
                    tr.a(numel * c.state_bytes),
                    step,
                )
        if c.optimizer == "adamw_foreach":
            sq = [tr.a(self.numel(n) * c.state_bytes) for n in names]  # _foreach_sqrt
            tr.f(sq)
        else:
            lr = tr.a(FP32)
            tr.f(lr)
        for n in self.order:  # zero_grad(set_to_none=True)
            h = self.grads.pop(n, None)
            tr.f(h)

    def run(self):
        rng = self.tr.rng
        for step in range(self.c.steps):
            for m in range(self.c.accum):
                b, s = self.c.shapes(step, m, rng)
                self.micro(b, s)
            self.opt_step()


# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------


def w_gpt13b_fixed(tr):
    """GPT-style 1.3B (24 x 2048, 16 heads, GELU MLP, vocab 50304), AMP bf16 with fp32
    master weights, flash attention, batch 2 x 2048 fixed, foreach AdamW with grad
    clipping, 6 steps."""
    c = TConf(
        layers=24, d=2048, heads=16, ff=8192, vocab=50304, max_pos=2048, amp=True,
        attn="flash", tied=True, steps=6, shapes=lambda st, m, r: (2, 2048),
    )
    TransformerTrainer(tr, c).run()


def w_gpt2m_eager(tr):
    """GPT-2 medium (355M: 24 x 1024, 16 heads), fp32, eager attention with the full
    scores/softmax/dropout tensors (HF GPT2 without SDPA), dropout 0.1, batch 4 x 1024
    fixed, HF-style logits kept alive, foreach AdamW, 6 steps."""
    c = TConf(
        layers=24, d=1024, heads=16, ff=4096, vocab=50257, max_pos=1024,
        attn="math", dropout=True, keep_logits=True, steps=6,
        shapes=lambda st, m, r: (4, 1024),
    )
    TransformerTrainer(tr, c).run()


def w_llama_varlen(tr):
    """Llama-style 760M (20 x 1536, 12 heads / 4 KV heads, SwiGLU 4096, RMSNorm, RoPE,
    vocab 32000, untied), AMP bf16, flash attention, fused AdamW. Each step draws a new
    sequence length (128..4096, multiples of 64) and a batch filling ~16k tokens, as
    length-bucketed pretraining does. 10 steps."""

    def shapes(step, micro, rng):
        s = rng.randrange(128, 4097, 64)
        b = max(1, 16384 // s)
        return b, s

    c = TConf(
        layers=20, d=1536, heads=12, kv_heads=4, ff=4096, vocab=32000, mlp="swiglu",
        norm="rms", bias=False, rope=True, pos_emb=False, max_pos=4096, tied=False,
        amp=True, attn="flash", optimizer="adamw_fused", clip=True, steps=10, shapes=shapes,
    )
    TransformerTrainer(tr, c).run()


def w_finetune_ckpt(tr):
    """Full fine-tune of a TinyLlama-1.1B-like model (22 x 2048, 32 heads / 4 KV heads,
    SwiGLU 5632, vocab 32000) in pure bf16 with bf16 AdamW states, eager attention (4D
    causal mask, materialised scores), activation checkpointing on every block, gradient
    accumulation over 4 micro-batches of 4 sequences with dynamic padding (length =
    longest in batch, multiple of 8), 4 optimizer steps."""

    def shapes(step, micro, rng):
        s = max(rng.randrange(64, 1025, 8) for _ in range(4))  # pad to the longest of 4
        return 4, s

    c = TConf(
        layers=22, d=2048, heads=32, kv_heads=4, ff=5632, vocab=32000, mlp="swiglu",
        norm="rms", bias=False, rope=True, pos_emb=False, max_pos=2048, tied=False,
        param_bytes=BF16, state_bytes=BF16, amp=False, attn="math", ckpt=True, accum=4,
        keep_logits=True, optimizer="adamw_foreach", steps=4, shapes=shapes,
    )
    TransformerTrainer(tr, c).run()


# ---- ResNet-50 ----------------------------------------------------------------------


def resnet50_convs():
    """(name, cin, cout, k, stride, hin) for every conv of ResNet-50 at 224x224, with the
    block structure needed for residual adds."""
    blocks = []
    convs = [("conv1", 3, 64, 7, 2, 224)]
    cin, h = 64, 56
    for stage, (w, n) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for i in range(n):
            stride = 2 if (i == 0 and stage > 0) else 1
            hout = h // stride
            blk = {
                "a": (f"s{stage}b{i}a", cin, w, 1, 1, h),
                "b": (f"s{stage}b{i}b", w, w, 3, stride, h),
                "c": (f"s{stage}b{i}c", w, 4 * w, 1, 1, hout),
                "down": (f"s{stage}b{i}d", cin, 4 * w, 1, stride, h) if i == 0 else None,
            }
            blocks.append(blk)
            cin, h = 4 * w, hout
    return convs[0], blocks


def w_resnet50(tr, schedule=None):
    """ResNet-50 training, batch 256 at 224x224, AMP fp16 with GradScaler, cudnn.benchmark:
    the first step runs cudnnFind for every conv shape (workspaces up to ~1.5 GB), later
    steps use the chosen algorithms' workspaces (0 to a few hundred MB). SGD with momentum
    and weight decay (foreach: momentum buffers created at the first step, an out-of-place
    grad + wd*param list each step). 8 steps."""
    rng = tr.rng
    N = 256
    steps = 8 if schedule is None else len(schedule)
    ab = FP16
    stem, blocks = resnet50_convs()
    allconvs = [stem] + [cv for b in blocks for cv in (b["a"], b["b"], b["c"], b["down"]) if cv]
    params = {}
    order = []

    def p(name, numel):
        params[name] = (tr.a(numel * FP32), numel)
        order.append(name)

    buffers = []
    for (name, ci, co, k, st, h) in allconvs:
        p(name + ".w", co * ci * k * k)
        p(name + ".bn.w", co)
        p(name + ".bn.b", co)
        buffers += [tr.a(co * FP32), tr.a(co * FP32), tr.a(I64)]
    p("fc.w", 2048 * 1000)
    p("fc.b", 1000)
    # Workspaces are a property of the conv shape (same shape, same algorithm).
    ws = {}
    for (name, ci, co, k, st, h) in allconvs:
        key = (ci, co, k, st, h)
        if key in ws:
            continue
        ho = h // st
        big = max(N * ci * h * h * ab, N * co * ho * ho * ab)
        r = random.Random(repr(key) + str(tr.seed))

        def pick(base):
            u = r.random()
            if u < 0.35:
                return 0
            if u < 0.7:
                return int(base * r.uniform(0.002, 0.05)) + r.randrange(0, 1 << 16)
            return int(min(base * r.uniform(0.2, 1.2), 420 * MIB)) + r.randrange(0, 1 << 20)

        ws[key] = {
            "fwd": pick(big) if k > 1 else (0 if r.random() < 0.6 else pick(big // 4)),
            "bwd_data": pick(big),
            "bwd_filter": pick(big) if k > 1 else int(big * r.uniform(0.01, 0.1)),
            "find": int(min(big * r.uniform(1.0, 3.0), 1536 * MIB)) + r.randrange(0, 1 << 20),
        }
    grads = {}
    mom = None
    scale = tr.a(FP32)
    growth = tr.a(I32)

    def wgrad(name, dt=ab):
        n = params[name][1]
        g = tr.a(n * dt)
        if dt != FP32:
            g32 = tr.a(n * FP32)
            tr.f(g)
            g = g32
        if grads.get(name) is None:
            grads[name] = g
        else:
            tr.f(g)

    for step in range(steps):
        if schedule is not None:
            # Activations scale with batch x height x width: an image-size change acts as a
            # batch change of the same area ratio (workspaces keep the batch-256 sizes).
            N = schedule[step]
        bench = step == 0
        found = set()
        casts = {}

        def cast(name):
            h = casts.get(name)
            if h is None:
                h = casts[name] = tr.a(params[name][1] * ab)
            return tr.ref(h)

        def conv_fwd(cv, x):
            """conv (saves x and the weight cast) + batchnorm. Returns the BN output; the
            caller's reference to it stands for the in-place ReLU that saves it."""
            name, ci, co, k, st, h = cv
            key = (ci, co, k, st, h)
            ho = h // st
            w = cast(name + ".w")
            if bench and (key, "f") not in found:  # cudnnFind: trial output + max workspace
                found.add((key, "f"))
                tmp = tr.a(N * co * ho * ho * ab)
                t = tr.a(ws[key]["find"])
                tr.f(t, tmp)
            wsh = tr.a(ws[key]["fwd"])
            y = tr.a(N * co * ho * ho * ab)
            tr.f(wsh)
            z = tr.a(N * co * ho * ho * ab)
            sm = tr.a(co * FP32)  # save_mean, save_invstd
            si = tr.a(co * FP32)
            return z, {"cv": cv, "x": tr.ref(x), "w": w, "y": y, "sm": sm, "si": si, "z": z}

        def conv_bwd(ctx, gz, relu, need_input_grad=True):
            """Consumes one reference of `gz` (grad of the BN output, or of the ReLU output
            when `relu`). Returns the grad of the conv input."""
            name, ci, co, k, st, h = ctx["cv"]
            key = (ci, co, k, st, h)
            if relu:
                gr = tr.a(gz.size)  # threshold_backward
                tr.f(gz, ctx["z"])
                gz = gr
            gy = tr.a(gz.size)  # BN backward
            wgrad(name + ".bn.w", FP32)
            wgrad(name + ".bn.b", FP32)
            tr.f(gz, ctx["y"], ctx["sm"], ctx["si"])
            if bench and (key, "b") not in found:
                found.add((key, "b"))
                t = tr.a(int(ws[key]["find"] * 0.9))
                tr.f(t)
                t = tr.a(int(ws[key]["find"] * 1.1))
                tr.f(t)
            gx = None
            if need_input_grad:
                wsd = tr.a(ws[key]["bwd_data"])
                gx = tr.a(N * ci * h * h * ab)
                tr.f(wsd)
            wsf = tr.a(ws[key]["bwd_filter"])
            wgrad(name + ".w")
            tr.f(wsf, gy, ctx["x"], ctx["w"])
            return gx

        img = tr.a(N * 3 * 224 * 224 * FP32)  # from pinned host memory
        tgt = tr.a(N * I64)
        img16 = tr.a(N * 3 * 224 * 224 * ab)  # autocast cast for conv1
        z, c0 = conv_fwd(stem, img16)
        tr.f(img16)
        mp = tr.a(N * 64 * 56 * 56 * ab)  # maxpool output + int64 indices
        mpi = tr.a(N * 64 * 56 * 56 * I64)
        x = mp
        bctx = []
        for i, blk in enumerate(blocks):
            xa, ca = conv_fwd(blk["a"], x)
            xb, cb = conv_fwd(blk["b"], xa)
            xc, cc = conv_fwd(blk["c"], xb)
            cd = None
            if blk["down"]:
                idn, cd = conv_fwd(blk["down"], x)
                tr.f(idn)  # out += identity (in place), relu (in place)
            else:
                pass  # out += x (in place)
            if i == 0:
                tr.f(x)  # maxpool output: saved only by the convs
            bctx.append((ca, cb, cc, cd, xc))
            x = xc
        pooled = tr.a(N * 2048 * ab)
        fw = cast("fc.w")
        fb = cast("fc.b")
        logits = tr.a(N * 1000 * ab)
        l32 = tr.a(N * 1000 * FP32)
        tr.f(logits)
        lsm = tr.a(N * 1000 * FP32)
        tr.f(l32)
        loss = tr.a(FP32)
        sl = tr.a(FP32)  # scaler.scale(loss)
        for h in casts.values():
            tr.f(h)
        # backward
        g = tr.a(FP32)
        gl = tr.a(N * 1000 * FP32)
        tr.f(lsm)
        g16 = tr.a(N * 1000 * ab)
        tr.f(gl)
        gp = tr.a(N * 2048 * ab)
        wgrad("fc.w")
        wgrad("fc.b")
        tr.f(g16, fw, fb, pooled)
        gx = tr.a(N * 2048 * 7 * 7 * ab)  # avgpool backward
        tr.f(gp)
        for (ca, cb, cc, cd, out) in reversed(bctx):
            gr = tr.a(gx.size)  # relu after the add
            tr.f(gx, out)
            if cd:
                tr.ref(gr)
                gskip = conv_bwd(cd, gr, relu=False)
            else:
                gskip = tr.ref(gr)
            gcb = conv_bwd(cc, gr, relu=False)
            gca = conv_bwd(cb, gcb, relu=True)
            gi = conv_bwd(ca, gca, relu=True)
            tot = tr.a(gi.size)  # grads of the block input summed
            tr.f(gi, gskip)
            gx = tot
        gm = tr.a(N * 64 * 112 * 112 * ab)  # maxpool backward
        tr.f(gx, mpi)
        conv_bwd(c0, gm, relu=True, need_input_grad=False)
        tr.f(g, loss, sl, img, tgt)
        # GradScaler.unscale_ + SGD step + update
        inv = tr.a(FP32)
        fi = tr.a(FP32)
        names = [n for n in order if n in grads]
        if mom is None:
            mom = {n: tr.a(params[n][1] * FP32) for n in names}  # clone(grad)
        else:
            gw = [tr.a(params[n][1] * FP32) for n in names]  # grad + wd * param
            tr.f(gw)
        tr.f(inv, fi)
        for n in order:
            tr.f(grads.pop(n, None))


# ---- LLM serving --------------------------------------------------------------------


def serve(tr, *, layers, d, heads, kv_heads, ff, vocab, steps, max_batch, max_prefill,
          rate, kv_mode, chunk, full_prompt_logits, max_tokens_in_flight, fused=False,
          out_mu=4.2, out_sigma=0.8):
    rng = tr.rng
    hd = d // heads
    kvd = kv_heads * hd
    # weights (bf16)
    w = [tr.a(vocab * d * BF16)]
    for _ in range(layers):
        w += [tr.a(d * BF16), tr.a(d * (d + 2 * kvd) * BF16), tr.a(d * d * BF16),
              tr.a(d * BF16), tr.a(d * 2 * ff * BF16), tr.a(ff * d * BF16)]
    w += [tr.a(d * BF16), tr.a(vocab * d * BF16)]
    rope = [tr.a(8192 * hd * FP32), tr.a(8192 * hd * FP32)]
    queue = []
    running = []  # dict(len, out, gen, kv)
    rid = 0

    def kv_bytes(tokens):
        return tokens * kvd * BF16

    def ensure_kv(req, upto, layer=None):
        """Make room for `upto` tokens. grow: per layer K and V re-allocated to the next
        multiple of `chunk` (copy, then free the old). blocks: one tensor holding K and V
        of every layer for `chunk` tokens per block."""
        if kv_mode == "grow":
            cap = req["cap"]
            if upto <= cap:
                return
            new = -(-upto // chunk) * chunk
            layer_range = range(layers) if layer is None else [layer]
            for L in layer_range:
                old = req["kv"][L]
                nk = tr.a(kv_bytes(new))
                nv = tr.a(kv_bytes(new))
                tr.f(old)
                req["kv"][L] = [nk, nv]
            if layer is None or layer == layers - 1:
                req["cap"] = new
        else:
            while len(req["kv"]) * chunk < upto:
                req["kv"].append(tr.a(layers * 2 * chunk * kvd * BF16))

    def layer_temps(T, L, reqs, decode):
        if fused:
            # vLLM-style: fused add+rmsnorm in place, rope in place, silu_and_mul fused
            qkv = tr.a(T * (d + 2 * kvd) * BF16)
            o = tr.a(T * d * BF16)
            tr.f(qkv)
            op = tr.a(T * d * BF16)
            tr.f(o)
            gu = tr.a(T * 2 * ff * BF16)
            act = tr.a(T * ff * BF16)
            tr.f(gu)
            dn = tr.a(T * d * BF16)
            tr.f(act, op)
            return dn
        n = tr.a(T * d * BF16)  # rmsnorm
        qkv = tr.a(T * (d + 2 * kvd) * BF16)
        tr.f(n)
        if kv_mode == "grow":
            for r in reqs:
                ensure_kv(r, r["len"] + 1, layer=L)
        if decode:
            # rope in place; split-k decode attention partials
            part = tr.a(T * heads * 4 * (hd + 1) * FP32)
            o = tr.a(T * d * BF16)
            tr.f(part, qkv)
        else:
            q = tr.a(T * d * BF16)  # rope
            k = tr.a(T * kvd * BF16)
            tr.f(k)  # written into the cache
            o = tr.a(T * d * BF16)
            tr.f(q, qkv)
        op = tr.a(T * d * BF16)
        tr.f(o)
        h = tr.a(T * d * BF16)  # residual add
        tr.f(op)
        n2 = tr.a(T * d * BF16)
        gu = tr.a(T * 2 * ff * BF16)
        tr.f(n2)
        act = tr.a(T * ff * BF16)
        tr.f(gu)
        dn = tr.a(T * d * BF16)
        tr.f(act)
        h2 = tr.a(T * d * BF16)
        tr.f(dn, h)
        return h2

    def sample(B):
        lg = tr.a(B * vocab * BF16)
        l32 = tr.a(B * vocab * FP32)
        tr.f(lg)
        t = tr.a(B * vocab * FP32)  # temperature
        tr.f(l32)
        sv = tr.a(B * vocab * FP32)  # sort for top-p
        si = tr.a(B * vocab * I64)
        cs = tr.a(B * vocab * FP32)  # cumsum
        pr = tr.a(B * vocab * FP32)  # softmax
        tok = tr.a(B * I64)
        tr.f(cs, sv, si, t, pr)
        return tok

    for step in range(steps):
        for _ in range(poisson(rng, rate)):
            plen = int(min(6000, max(8, rng.lognormvariate(6.0, 1.0))))
            olen = int(min(1000, max(4, rng.lognormvariate(out_mu, out_sigma))))
            queue.append({"id": rid, "len": plen, "out": olen, "gen": 0, "kv": [], "cap": 0})
            rid += 1
        # admission
        admit = []
        toks = 0
        in_flight = sum(r["len"] + r["out"] for r in running)
        while queue and len(running) + len(admit) < max_batch:
            r = queue[0]
            if admit and toks + r["len"] > max_prefill:
                break
            if in_flight + r["len"] + r["out"] > max_tokens_in_flight:
                break
            queue.pop(0)
            admit.append(r)
            toks += r["len"]
            in_flight += r["len"] + r["out"]
        if admit:
            ids = tr.a(toks * I64)
            pos = tr.a(toks * I64)
            cu = tr.a((len(admit) + 1) * I32)
            for r in admit:
                if kv_mode == "grow":
                    r["kv"] = [None] * layers
                    cap = -(-(r["len"] + 1) // chunk) * chunk
                    r["cap"] = cap
                else:
                    ensure_kv(r, r["len"] + 1)
            x = tr.a(toks * d * BF16)
            for L in range(layers):
                if kv_mode == "grow":
                    for r in admit:
                        r["kv"][L] = [tr.a(kv_bytes(r["cap"])), tr.a(kv_bytes(r["cap"]))]
                y = layer_temps(toks, L, [], decode=False)
                tr.f(x)
                x = y
            nf = tr.a(toks * d * BF16)
            tr.f(x)
            if full_prompt_logits:
                lg = tr.a(toks * vocab * BF16)
                last = tr.a(len(admit) * vocab * BF16)
                tr.f(lg, last)
            tok = sample(len(admit))
            tr.f(nf, tok, ids, pos, cu)
            for r in admit:
                r["gen"] = 1
            running += admit
        # decode for the requests already running (not the ones just prefilled)
        dec = [r for r in running if r not in admit]
        if dec:
            B = len(dec)
            ids = tr.a(B * I64)
            pos = tr.a(B * I64)
            bt = tr.a(B * I32)  # seq lens
            if kv_mode == "blocks":
                for r in dec:
                    ensure_kv(r, r["len"] + 1)
                tab = tr.a(B * max(len(r["kv"]) for r in dec) * I32)  # block table
            else:
                tab = None
            x = tr.a(B * d * BF16)
            for L in range(layers):
                y = layer_temps(B, L, dec, decode=True)
                tr.f(x)
                x = y
            for r in dec:
                r["len"] += 1
                r["gen"] += 1
                if kv_mode == "grow":
                    r["cap"] = max(r["cap"], -(-r["len"] // chunk) * chunk)
            nf = tr.a(B * d * BF16)
            tr.f(x)
            tok = sample(B)
            tr.f(nf, tok, ids, pos, bt, tab)
        # completions
        still = []
        for r in running:
            if r["gen"] >= r["out"]:
                tr.notes["completed"] = tr.notes.get("completed", 0) + 1
                if kv_mode == "grow":
                    for kv in r["kv"]:
                        tr.f(kv)
                else:
                    tr.f(r["kv"])
            else:
                still.append(r)
        running = still
        tr.notes["max_running"] = max(tr.notes.get("max_running", 0), len(running))
    tr.notes["arrived"] = rid
    tr.notes["running_at_end"] = len(running)


def poisson(rng, lam):
    L = math.exp(-lam)
    k, p = 0, 1.0
    while True:
        p *= rng.random()
        if p <= L:
            return k
        k += 1


def w_serve_grow(tr):
    """LLM serving, HF-transformers style, Llama-3.2-1B-like model (16 x 2048, 32 heads /
    8 KV heads, FFN 8192, vocab 128256, bf16 weights). Continuous batching (up to 48
    running), Poisson arrivals, lognormal prompt (median ~400, up to 6000) and output
    (median ~67, up to 1000) lengths, packed prefill up to 8192 tokens with full-prompt
    logits. KV cache per request and layer, K and V separate, re-allocated larger in
    256-token steps (allocate the larger tensor, copy, free the old), freed at completion.
    Unfused layer ops (norm, rope, residual temporaries). 330 engine steps."""
    serve(tr, layers=16, d=2048, heads=32, kv_heads=8, ff=8192, vocab=128256, steps=330,
          max_batch=48, max_prefill=8192, rate=0.6, kv_mode="grow", chunk=256,
          full_prompt_logits=True, max_tokens_in_flight=120_000)


def w_serve_blocks(tr):
    """LLM serving, vLLM style without a preallocated pool: Mistral-7B-like model (32 x
    4096, 32 heads / 8 KV heads, FFN 14336, vocab 32000, bf16). Continuous batching (up to
    64 running), KV allocated per request in blocks of 128 tokens, each block one tensor
    holding K and V of all layers (16 MiB), freed at completion; fused layer ops,
    last-token logits only. 300 engine steps."""
    serve(tr, layers=32, d=4096, heads=32, kv_heads=8, ff=14336, vocab=32000, steps=300,
          max_batch=64, max_prefill=4096, rate=0.8, kv_mode="blocks", chunk=128,
          full_prompt_logits=False, max_tokens_in_flight=150_000, fused=True)


# ---- adversarial: training with evaluation phases ------------------------------------


def w_train_eval(tr):
    """Training of a 24 x 1024 model with a 128256-token vocabulary (so the logits and
    their fp32 copies, 1-4 GB each, dominate: few huge buffers), alternating every 3 steps
    with an evaluation phase that (a) computes eval loss at twice the batch, (b) generates
    for 64 prompts with per-layer KV caches grown in 64-token steps, and (c) keeps a cache
    of per-sample hidden-state embeddings and generated token buffers (hundreds of small
    tensors, 0.1-8 MB) alive until the next evaluation replaces them. 4 cycles."""
    rng = tr.rng
    c = TConf(
        layers=24, d=1024, heads=16, kv_heads=8, ff=2816, vocab=128256, mlp="swiglu",
        norm="rms", bias=False, rope=True, pos_emb=False, max_pos=4096, tied=True,
        amp=True, attn="flash", optimizer="adamw_foreach", steps=0,
        shapes=lambda st, m, r: (2, 2048),
    )
    t = TransformerTrainer(tr, c)
    kept = []
    for cycle in range(4):
        for step in range(3):
            t.micro(2, 2048)
            t.opt_step()
        # (a) eval loss, no grad, batch 4 x 2048
        b, s = 4, 2048
        T = b * s
        x = tr.a(T * c.d * FP32)
        for L in range(c.layers):
            tmp = [tr.a(T * c.d * BF16), tr.a(T * (c.d + 2 * c.kvd) * BF16),
                   tr.a(T * c.d * BF16)]
            tr.f(tmp[0])
            h = tr.a(T * c.ff * BF16)
            h2 = tr.a(T * c.ff * BF16)
            tr.f(tmp[1], tmp[2])
            y = tr.a(T * c.d * FP32)
            tr.f(h, h2, x)
            x = y
        lg = tr.a(T * c.vocab * BF16)
        l32 = tr.a(T * c.vocab * FP32)
        tr.f(lg)
        lsm = tr.a(T * c.vocab * FP32)
        tr.f(l32, lsm, x)
        # (c) drop the previous evaluation's cache, build the new one
        old, kept = kept, []
        tr.f(old)
        # (b) generation with growing KV caches, 64 prompts in 4 batches of 16
        for gb in range(4):
            B = 16
            plen = [rng.randrange(32, 512) for _ in range(B)]
            olen = 128
            P = max(plen)
            kv = []
            cap = -(-(P + 1) // 64) * 64
            x = tr.a(B * P * c.d * BF16)
            for L in range(c.layers):
                kv.append([tr.a(B * cap * c.kvd * BF16), tr.a(B * cap * c.kvd * BF16)])
                h = tr.a(B * P * c.ff * BF16)
                y = tr.a(B * P * c.d * BF16)
                tr.f(h, x)
                x = y
            lg = tr.a(B * P * c.vocab * BF16)
            tr.f(lg, x)
            toks = tr.a(B * (P + olen) * I64)
            for i in range(olen):
                cur = P + i + 1
                x = tr.a(B * c.d * BF16)
                grow = cur > cap
                for L in range(c.layers):
                    if grow:  # torch.cat-style growth in 64-token steps
                        nk = tr.a(B * (cap + 64) * c.kvd * BF16)
                        nv = tr.a(B * (cap + 64) * c.kvd * BF16)
                        tr.f(kv[L])
                        kv[L] = [nk, nv]
                    h = tr.a(B * c.ff * BF16)
                    tr.f(h)
                if grow:
                    cap += 64
                lg = tr.a(B * c.vocab * BF16)
                pr = tr.a(B * c.vocab * FP32)
                tr.f(lg, pr, x)
            # keep: per-sample final hidden states (fp32) and the generated tokens
            for j in range(B):
                kept.append(tr.a((plen[j] + olen) * c.d * FP32))
                kept.append(tr.a((plen[j] + olen) * I64))
            kept.append(toks)
            for pair in kv:
                tr.f(pair)
        # metric buffers
        kept += [tr.a(rng.randrange(1, 64) * 4096) for _ in range(64)]


# ---- MoE training with variable expert loads ------------------------------------------


def w_moe(tr):
    """Mixture-of-experts training (16 x 1024, 8 experts of FFN 2816, top-2 routing,
    vocab 50304), AMP bf16, flash attention, batch 4 x 2048. Each step the router sends a
    different number of tokens to each expert (Dirichlet-like imbalance), so the expert
    activations and their gradients change size every step and every layer. Fused AdamW,
    8 steps."""
    rng = tr.rng
    L_, d, E, ff, V = 16, 1024, 8, 2816, 50304
    b, s = 4, 2048
    T = b * s
    params = []
    wte = tr.a(V * d * FP32)
    layer_p = []
    for L in range(L_):
        ps = {"qkv": tr.a(d * 3 * d * FP32), "o": tr.a(d * d * FP32),
              "n1": tr.a(d * FP32), "n2": tr.a(d * FP32), "router": tr.a(d * E * FP32),
              "experts": [[tr.a(d * ff * FP32), tr.a(d * ff * FP32), tr.a(ff * d * FP32)]
                          for _ in range(E)]}
        layer_p.append(ps)
    nf = tr.a(d * FP32)
    numels = [V * d]
    for L in range(L_):
        numels += [d * 3 * d, d * d, d, d, d * E] + [d * ff, d * ff, ff * d] * E
    numels.append(d)
    state = None
    for step in range(8):
        grads = []
        ids = tr.a(T * I64)
        lab = tr.a(T * I64)
        x = tr.a(T * d * FP32)
        saved = []
        for L in range(L_):
            ctx = []
            n1 = tr.a(T * d * FP32)
            n1c = tr.a(T * d * BF16)
            tr.f(n1)
            wq = tr.a(d * 3 * d * BF16)
            qkv = tr.a(T * 3 * d * BF16)
            out = tr.a(T * d * BF16)
            lse = tr.a(b * 16 * s * FP32)
            wo = tr.a(d * d * BF16)
            o = tr.a(T * d * BF16)
            x2 = tr.a(T * d * FP32)
            tr.f(o)
            ctx += [n1c, wq, qkv, out, lse, wo]
            n2 = tr.a(T * d * FP32)
            n2c = tr.a(T * d * BF16)
            tr.f(n2)
            wr = tr.a(d * E * BF16)
            logits = tr.a(T * E * BF16)
            probs = tr.a(T * E * FP32)
            topv = tr.a(T * 2 * FP32)
            topi = tr.a(T * 2 * I64)
            # token counts per expert
            wts = [rng.gammavariate(0.6, 1.0) for _ in range(E)]
            tot = sum(wts)
            counts = [int(2 * T * w_ / tot) for w_ in wts]
            counts[0] += 2 * T - sum(counts)
            perm = tr.a(2 * T * I64)
            hist = tr.a(E * I64)
            xs = tr.a(2 * T * d * BF16)  # tokens permuted by expert
            ctx += [wr, logits, probs, topv, topi, perm, hist]
            eouts = []
            for e, n in enumerate(counts):
                if n == 0:
                    continue
                wg = tr.a(d * ff * BF16)
                wu = tr.a(d * ff * BF16)
                wd = tr.a(ff * d * BF16)
                g = tr.a(n * ff * BF16)
                u = tr.a(n * ff * BF16)
                a_ = tr.a(n * ff * BF16)
                pr = tr.a(n * ff * BF16)
                y = tr.a(n * d * BF16)
                ctx += [("e", e, n, [wg, wu, wd, g, u, a_, pr])]
                eouts.append(y)
            cat = tr.a(2 * T * d * BF16)
            tr.f(eouts)
            comb = tr.a(T * d * BF16)
            tr.f(cat)
            x3 = tr.a(T * d * FP32)
            tr.f(comb)
            ctx += [xs, n2c, x2]
            saved.append((x, ctx))
            x = x3
        nfo = tr.a(T * d * BF16)
        wh = tr.a(V * d * BF16)
        lg = tr.a(T * V * BF16)
        l32 = tr.a(T * V * FP32)
        tr.f(lg)
        lsm = tr.a(T * V * FP32)
        tr.f(l32)
        # backward
        gl = tr.a(T * V * FP32)
        tr.f(lsm)
        g16 = tr.a(T * V * BF16)
        tr.f(gl)
        gh = tr.a(T * d * BF16)
        gw = tr.a(V * d * BF16)
        gw32 = tr.a(V * d * FP32)
        tr.f(gw, g16, wh, nfo)
        grads.append(gw32)
        g = tr.a(T * d * FP32)
        tr.f(gh, x)
        for (xin, ctx) in reversed(saved):
            gcomb = tr.a(T * d * BF16)
            gcat = tr.a(2 * T * d * BF16)
            tr.f(gcomb)
            gxs = tr.a(2 * T * d * BF16)
            for item in reversed([c_ for c_ in ctx if isinstance(c_, tuple)]):
                _, e, n, hs = item
                wg, wu, wd, gg, uu, aa, pp = hs
                gpr = tr.a(n * ff * BF16)
                gwd = tr.a(ff * d * BF16)
                tr.f(pp, wd)
                ga = tr.a(n * ff * BF16)
                gu = tr.a(n * ff * BF16)
                tr.f(gpr, aa)
                gg2 = tr.a(n * ff * BF16)
                tr.f(ga, gg)
                gx1 = tr.a(n * d * BF16)
                gwu = tr.a(d * ff * BF16)
                tr.f(gu, uu, wu)
                gx2 = tr.a(n * d * BF16)
                gwg = tr.a(d * ff * BF16)
                tr.f(gg2, wg)
                for gw16 in (gwd, gwu, gwg):
                    g32 = tr.a(gw16.size * 2)
                    tr.f(gw16)
                    grads.append(g32)
                tr.f(gx1, gx2)
            tr.f(gcat)
            rest = [c_ for c_ in ctx if not isinstance(c_, tuple)]
            n1c, wq, qkv, out, lse, wo, wr, logits, probs, topv, topi, perm, hist, xs, n2c, x2 = rest
            gr = tr.a(T * E * FP32)
            gwr = tr.a(d * E * FP32)
            grads.append(gwr)
            tr.f(gr, probs, logits, topv, topi, perm, hist, xs, wr)
            gn = tr.a(T * d * BF16)
            tr.f(gxs, n2c)
            gn32 = tr.a(T * d * FP32)
            tr.f(gn)
            gx2 = tr.a(T * d * FP32)
            tr.f(gn32, x2)
            g2 = tr.a(T * d * FP32)
            tr.f(g, gx2)
            go = tr.a(T * d * BF16)
            gwo = tr.a(d * d * BF16)
            gwo32 = tr.a(d * d * FP32)
            tr.f(gwo, wo, out)
            grads.append(gwo32)
            gqkv = tr.a(T * 3 * d * BF16)
            acc = tr.a(b * 16 * s * 64 * FP32)
            tr.f(acc, go, lse, qkv)
            gn = tr.a(T * d * BF16)
            gwq = tr.a(d * 3 * d * BF16)
            gwq32 = tr.a(d * 3 * d * FP32)
            tr.f(gwq, gqkv, wq, n1c)
            grads.append(gwq32)
            gx = tr.a(T * d * FP32)
            tr.f(gn, xin)
            g1 = tr.a(T * d * FP32)
            tr.f(g2, gx)
            g = g1
        gwte = tr.a(V * d * FP32)
        tr.f(gwte, g, ids, lab)  # accumulate into the tied head grad
        if state is None:
            state = [tr.a(n * FP32) for n in numels for _ in range(2)]  # exp_avg, exp_avg_sq
        tr.f(grads)


# ---- more workload kinds: batch and image-size cycling, variable-length fine-tuning,
# ---- vision transformers, serving with random shapes, KV caches grown by concatenation,
# ---- random size mixes around the allocator's borders ---------------------------------


def w_resnet_batch_cycle(tr):
    """ResNet-50 training as in resnet50-amp, but the batch size cycles through 256, 128,
    64, 192, 32 and 224 (as a job that steps its batch size, or a data loader whose last
    batches are short), two cycles: every activation changes size every step."""
    w_resnet50(tr, schedule=[256, 128, 64, 192, 32, 224] * 2)


def w_convnext_multiscale(tr):
    """Convolutional training with multi-scale inputs (ConvNeXt / detection style): batch
    96, image side drawn each step from 160 to 320 in steps of 32, so activation sizes
    change with the square of the side. Modelled on the ResNet-50 layer shapes, 12 steps."""
    sides = [tr.rng.randrange(160, 321, 32) for _ in range(12)]
    w_resnet50(tr, schedule=[96 * (s / 224) ** 2 for s in sides])


def w_bert_varlen(tr):
    """BERT-base fine-tuning (12 x 768, 12 heads, vocab 30522, learned positions), AMP bf16,
    eager attention (scores materialised), batch 32 padded to the longest sequence of the
    batch (32..512, multiples of 8), HF-style logits kept alive, foreach AdamW, 12 steps."""

    def shapes(step, micro, rng):
        return 32, max(rng.randrange(32, 513, 8) for _ in range(3))

    c = TConf(
        layers=12, d=768, heads=12, ff=3072, vocab=30522, max_pos=512, amp=True,
        attn="math", dropout=True, keep_logits=True, steps=12, shapes=shapes,
    )
    TransformerTrainer(tr, c).run()


def w_vit_bf16(tr):
    """ViT-B/16 training under bf16 autocast (12 x 768, 12 heads, 197 tokens, 1000
    classes as the vocabulary of the head), batch 128 fixed, flash attention, foreach
    AdamW, 8 steps."""
    c = TConf(
        layers=12, d=768, heads=12, ff=3072, vocab=1000, max_pos=197, amp=True,
        attn="flash", tied=False, steps=8, shapes=lambda st, m, r: (128, 197),
    )
    TransformerTrainer(tr, c).run()


def w_gpt2_serve_random(tr):
    """GPT-2 (12 x 768, vocab 50257) serving requests of random batch (1..32) and length
    (8..1024) in fp16: a full forward pass with eager attention and full logits, then a
    short generation (8..32 tokens) that grows a per-layer KV cache by concatenation.
    200 requests."""
    rng = tr.rng
    L, d, H, V, ab = 12, 768, 12, 50257, FP16
    weights = [tr.a(n * ab) for n in [V * d, 1024 * d] + [12 * d * d + 13 * d] * L]
    for _ in range(200):
        B = rng.randint(1, 32)
        T = rng.randint(8, 1024)
        ids = tr.a(B * T * I64)
        x = tr.a(B * T * d * ab)
        cache = []
        for _layer in range(L):
            ln = tr.a(B * T * d * ab)
            qkv = tr.a(B * T * 3 * d * ab)
            k = tr.a(B * T * d * ab)
            v = tr.a(B * T * d * ab)
            scores = tr.a(B * H * T * T * ab)
            probs = tr.a(B * H * T * T * ab)
            tr.f(scores)
            att = tr.a(B * T * d * ab)
            tr.f(probs, qkv, ln)
            proj = tr.a(B * T * d * ab)
            tr.f(att)
            x2 = tr.a(B * T * d * ab)
            tr.f(proj, x)
            h1 = tr.a(B * T * 4 * d * ab)
            h2 = tr.a(B * T * 4 * d * ab)
            tr.f(h1)
            out = tr.a(B * T * d * ab)
            tr.f(h2)
            x = tr.a(B * T * d * ab)
            tr.f(out, x2)
            cache.append([k, v])
        logits = tr.a(B * T * V * ab)
        tr.f(x)
        nxt = tr.a(B * I64)
        tr.f(logits)
        n = T
        for _step in range(rng.randint(8, 32)):
            n += 1
            for pair in cache:
                for j in range(2):
                    grown = tr.a(B * n * d * ab)
                    tr.f(pair[j])
                    pair[j] = grown
                tmp = tr.a(B * H * n * ab)
                tr.f(tmp)
            step_logits = tr.a(B * V * ab)
            tr.f(step_logits)
        tr.f(nxt, ids)
        tr.f([p for pair in cache for p in pair])
    tr.f(weights)


def w_kv_decode_cat(tr, batch_max=16, chunk=1, batches=30):
    """Decoder serving with a growing KV cache (HF DynamicCache style): a Llama-like 1B
    model (16 x 2048, 32 heads / 8 KV heads, vocab 128256, bf16) serves batches of 1..16
    requests, prefill of 64..1024 tokens, then 32..256 decode steps, each of which
    re-allocates every layer's K and V one token longer (torch.cat), with fp32 logits per
    step. 30 batches."""
    rng = tr.rng
    L, d, heads, kvh, V, ab = 16, 2048, 32, 8, 128256, BF16
    hd = d // heads
    weights = [tr.a(V * d * ab)] + [tr.a((4 * d * d + 3 * d * 8192) * ab) for _ in range(L)]
    for _ in range(batches):
        B = rng.randint(1, batch_max)
        P = rng.randint(64, 1024)
        steps = rng.randint(32, 256)
        kv = []
        x = tr.a(B * P * d * ab)
        for _layer in range(L):
            k = tr.a(B * P * kvh * hd * ab)
            v = tr.a(B * P * kvh * hd * ab)
            q = tr.a(B * P * d * ab)
            mlp = tr.a(B * P * 8192 * ab)
            tr.f(q, mlp)
            kv.append([k, v, P])
        logits = tr.a(B * V * FP32)
        tr.f(x, logits)
        n = P
        for _step in range(steps):
            n += 1
            h = tr.a(B * d * ab)
            for entry in kv:
                if n > entry[2]:
                    entry[2] += chunk  # capacity grows by `chunk` tokens
                    for j in range(2):
                        grown = tr.a(B * entry[2] * kvh * hd * ab)
                        tr.f(entry[j])
                        entry[j] = grown
                scores = tr.a(B * heads * n * FP32)
                tr.f(scores)
            logits = tr.a(B * V * FP32)
            tr.f(h, logits)
        tr.f([p for entry in kv for p in entry[:2]])
    tr.f(weights)


def w_kv_decode_chunked(tr):
    """kv-decode-cat, but batches of 1..8 requests whose KV caches grow in steps of 64
    tokens (a cache that over-allocates, then copies when full). The shape on which
    `policy:compact` with fixed segments was worse than PyTorch native (issue 9)."""
    w_kv_decode_cat(tr, batch_max=8, chunk=64, batches=30)


def w_random_mix(tr):
    """Random allocations and frees: sizes log-uniform from 512 B to 256 MiB, a third of
    them within 10% of the allocator's borders (1 MiB, 10 MiB, 128 MiB), lifetimes drawn
    from a heavy-tailed distribution, about 2 GiB live. 60,000 operations."""
    rng = tr.rng
    live = []
    borders = [1 << 20, 10 << 20, 128 << 20]
    for _ in range(30000):
        if rng.random() < 1 / 3:
            size = int(rng.choice(borders) * rng.uniform(0.9, 1.1))
        else:
            size = int(math.exp(rng.uniform(math.log(512), math.log(256 << 20))))
        live.append((tr.a(size), rng.paretovariate(1.2)))
        while tr.live > (2 << 30) or (live and rng.random() < 0.5):
            i = min(range(len(live)), key=lambda j: live[j][1]) if rng.random() < 0.7 \
                else rng.randrange(len(live))
            tr.f(live.pop(i)[0])
    tr.f([h for h, _ in live])


WORKLOADS = {
    "gpt-1.3b-fixed": w_gpt13b_fixed,
    "gpt2-medium-eager": w_gpt2m_eager,
    "llama-760m-varlen": w_llama_varlen,
    "tinyllama-ft-ckpt-accum": w_finetune_ckpt,
    "resnet50-amp": w_resnet50,
    "serve-1b-grow": w_serve_grow,
    "serve-7b-blocks": w_serve_blocks,
    "train-eval-phases": w_train_eval,
    "moe-varying-experts": w_moe,
    "resnet50-batch-cycle": w_resnet_batch_cycle,
    "convnet-multiscale": w_convnext_multiscale,
    "bert-base-varlen": w_bert_varlen,
    "vit-b16-bf16": w_vit_bf16,
    "gpt2-serve-random": w_gpt2_serve_random,
    "kv-decode-cat": w_kv_decode_cat,
    "kv-decode-chunked": w_kv_decode_chunked,
    "random-mix": w_random_mix,
}

SEEDS = {name: 1000 + i for i, name in enumerate(WORKLOADS)}


def generate(name, out_dir, seed_offset=0):
    tr = Trace(SEEDS[name] + seed_offset)
    WORKLOADS[name](tr)
    path = os.path.join(out_dir, name + ".csv")
    tr.write(path)
    return tr, path


def main(argv):
    if "--list" in argv:
        for n, f in WORKLOADS.items():
            print(f"{n}: {' '.join(f.__doc__.split())}")
        return 0
    seed_offset = 0
    if "--seed-offset" in argv:
        i = argv.index("--seed-offset")
        seed_offset = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if not argv:
        print(__doc__)
        return 2
    out_dir = argv[0]
    names = argv[1:] or list(WORKLOADS)
    os.makedirs(out_dir, exist_ok=True)
    for n in names:
        tr, path = generate(n, out_dir, seed_offset)
        allocs = sum(1 for r in tr.rows if r[0] == "alloc")
        print(f"{n:26s} rows {len(tr.rows):7d} allocs {allocs:7d} "
              f"peak_live {tr.peak / GIB:6.2f} GiB  final_live {tr.live / GIB:6.2f} GiB "
              f"-> {path} {tr.notes or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
