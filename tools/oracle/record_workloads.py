#!/usr/bin/env python3
"""Records real PyTorch workloads' allocation traces on a CUDA device.

Each workload runs in its own process with `torch.cuda.memory._record_memory_history` on from
before the first allocation, then its snapshot's `device_traces` are written out as a trace in
the `action,id,size,stream` CSV format of shared/traces (ids are PyTorch's addresses, sizes the
bytes the program asked for, streams numbered densely from 0). The models are built from
configurations with random weights: nothing is downloaded.

Usage:
    python3 record_workloads.py OUT_DIR NAME [--snapshot]   # one workload
    python3 record_workloads.py --list

With --snapshot the whole `_dump_snapshot` pickle (with Python stacks) is kept beside the CSV,
as a PyTorch user would produce it.
"""

import json
import os
import random
import sys
import time

import torch


def seed(n):
    random.seed(n)
    torch.manual_seed(n)


def resnet50_bs_cycle():
    """ResNet-50 training, SGD with momentum, batch size cycling 32/64/16/48 at 224 px."""
    import torchvision

    seed(1)
    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step, bs in enumerate([32, 64, 16, 48, 32, 64, 16, 48]):
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (bs,), device="cuda")
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        del x, y, loss


def bert_varlen():
    """BERT-base fine-tuning for classification, AdamW, batch 16, random sequence lengths."""
    from transformers import BertConfig, BertForSequenceClassification

    seed(2)
    model = BertForSequenceClassification(BertConfig(num_labels=2)).cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    rng = random.Random(2)
    for step in range(10):
        length = rng.randint(32, 512)
        ids = torch.randint(0, 30000, (16, length), device="cuda")
        mask = torch.ones_like(ids)
        labels = torch.randint(0, 2, (16,), device="cuda")
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        opt.step()
        del ids, mask, labels, out


def vit_bf16():
    """ViT-B/16 training under bf16 autocast, AdamW, batch 64."""
    import torchvision

    seed(3)
    model = torchvision.models.vit_b_16().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(6):
        x = torch.randn(64, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (64,), device="cuda")
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        del x, y, loss


def convnext_multiscale():
    """ConvNeXt-Tiny training, AdamW, batch 32, input size cycling 160/224/256/192."""
    import torchvision

    seed(4)
    model = torchvision.models.convnext_tiny().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step, px in enumerate([160, 224, 256, 192, 224, 160, 256, 192]):
        x = torch.randn(32, 3, px, px, device="cuda")
        y = torch.randint(0, 1000, (32,), device="cuda")
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        del x, y, loss


def gpt2_serving():
    """GPT-2 small in fp16 answering 40 requests of random batch (1-32) and length (16-1024),
    one forward pass each, without a KV cache."""
    from transformers import GPT2Config, GPT2LMHeadModel

    seed(5)
    model = GPT2LMHeadModel(GPT2Config()).cuda().half().eval()
    rng = random.Random(5)
    with torch.no_grad():
        for request in range(40):
            bs = rng.randint(1, 32)
            length = rng.randint(16, 1024)
            ids = torch.randint(0, 50000, (bs, length), device="cuda")
            logits = model(input_ids=ids, use_cache=False).logits
            token = logits[:, -1].argmax(-1)
            del ids, logits, token


def decode_kv():
    """A small Llama-style decoder (8 layers, 1024 wide) in fp16 generating greedily with a
    growing KV cache: 8 requests of random batch (1-8), prompt (32-512) and new tokens
    (32-128)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    seed(6)
    config = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=32000,
        max_position_embeddings=2048,
    )
    model = LlamaForCausalLM(config).cuda().half().eval()
    rng = random.Random(6)
    with torch.no_grad():
        for request in range(8):
            bs = rng.randint(1, 8)
            prompt = rng.randint(32, 512)
            new = rng.randint(32, 128)
            ids = torch.randint(0, 32000, (bs, prompt), device="cuda")
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
            del ids, out


def mlp_small():
    """A 3-layer MLP trained for 3 steps: a small snapshot for tests."""
    seed(7)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters())
    for step in range(3):
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, loss


WORKLOADS = {
    f.__name__: f
    for f in [
        resnet50_bs_cycle,
        bert_varlen,
        vit_bf16,
        convnext_multiscale,
        gpt2_serving,
        decode_kv,
        mlp_small,
    ]
}


def trace_rows(snapshot):
    """The alloc and free_completed events of device 0 as (action, addr, size, stream) rows."""
    rows = []
    streams = {}
    for entry in snapshot["device_traces"][0]:
        action = entry["action"]
        if action not in ("alloc", "free_completed"):
            continue
        stream = streams.setdefault(entry["stream"], len(streams))
        rows.append(("alloc" if action == "alloc" else "free", entry["addr"], entry["size"], stream))
    return rows


def probe_size_semantics():
    """Whether an alloc event's size is the requested or the rounded size: asks for 1000 B."""
    before = len(torch.cuda.memory._snapshot()["device_traces"][0])
    t = torch.empty(1000, dtype=torch.uint8, device="cuda")
    events = torch.cuda.memory._snapshot()["device_traces"][0][before:]
    del t
    return [(e["action"], e["size"]) for e in events]


def main():
    if sys.argv[1:] == ["--list"]:
        for name, f in WORKLOADS.items():
            print(f"{name}: {f.__doc__.splitlines()[0]}")
        return
    out_dir, name = sys.argv[1], sys.argv[2]
    keep_snapshot = "--snapshot" in sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(
        enabled="all",
        context="all" if keep_snapshot else None,
        stacks="python",
        max_entries=5_000_000,
    )
    probe = probe_size_semantics() if name == "mlp_small" else None
    start = time.time()
    WORKLOADS[name]()
    torch.cuda.synchronize()
    seconds = time.time() - start
    snapshot = torch.cuda.memory._snapshot()
    if keep_snapshot:
        torch.cuda.memory._dump_snapshot(os.path.join(out_dir, f"{name}.pickle"))
    rows = trace_rows(snapshot)
    with open(os.path.join(out_dir, f"{name}.csv"), "w") as f:
        f.write("action,id,size,stream\n")
        for action, addr, size, stream in rows:
            f.write(f"{action},{addr},{size},{stream}\n")
    stats = torch.cuda.memory_stats()
    meta = {
        "workload": name,
        "description": WORKLOADS[name].__doc__,
        "rows": len(rows),
        "seconds": seconds,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "reserved_peak": stats["reserved_bytes.all.peak"],
        "allocated_peak": stats["allocated_bytes.all.peak"],
        "requested_peak": stats["requested_bytes.all.peak"],
        "size_probe": probe,
    }
    with open(os.path.join(out_dir, f"{name}.meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
