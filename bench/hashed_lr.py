#!/usr/bin/env python3
"""A hashed logistic regression on Criteo-format files: the baseline the
default DLRM job is compared against (a default 1-epoch job should beat this
model trained 3 epochs, and a 3-epoch job should not fall below it).

Every field becomes one hashed one-hot feature: a categorical field by its
value, an integer field by floor(log2(1 + v)) (v < 0 and missing get their own
buckets), plus a bias. Per-coordinate Adagrad (lr --lr), --buckets hash
buckets, lines in file order each epoch. Prints the test AUC and logloss after
every epoch, and the share of training ids seen once (the long tail).
Pure Python, no dependencies: about 20 s per 100k lines per epoch.

  python3 bench/hashed_lr.py --data_dir=/tmp/data [--epochs=3] [--lr=0.1]
"""
import argparse
import math
import os
import zlib


def read_lines(paths):
    for path in paths:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) != 40:
                    continue
                yield parts


def features(parts, buckets):
    out = [0]
    for j in range(13):
        v = parts[1 + j]
        if v == "":
            tok = "i%d:m" % j
        else:
            x = int(v)
            tok = "i%d:n" % j if x < 0 else "i%d:%d" % (j, int(math.log2(1 + x)))
        out.append(1 + zlib.crc32(tok.encode()) % (buckets - 1))
    for f in range(26):
        tok = "c%d:%s" % (f, parts[14 + f])
        out.append(1 + zlib.crc32(tok.encode()) % (buckets - 1))
    return out


def auc(labels, scores):
    pairs = sorted(zip(scores, labels))
    pos = sum(labels)
    neg = len(labels) - pos
    rank_sum, i = 0.0, 0
    while i < len(pairs):  # Average ranks over ties.
        k = i
        while k < len(pairs) and pairs[k][0] == pairs[i][0]:
            k += 1
        avg = (i + 1 + k) / 2.0
        rank_sum += avg * sum(l for _, l in pairs[i:k])
        i = k
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)


def sigmoid(z):
    if z < -35:
        return 1e-15
    if z > 35:
        return 1 - 1e-15
    return 1 / (1 + math.exp(-z))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", required=True, help="has train*.tsv and eval.tsv (ps_datagen)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--buckets", type=int, default=1 << 22)
    args = p.parse_args()
    names = sorted(os.listdir(args.data_dir))
    train = [os.path.join(args.data_dir, n) for n in names if n.startswith("train") and n.endswith(".tsv")]
    evals = [os.path.join(args.data_dir, n) for n in names if n.startswith("eval") and n.endswith(".tsv")]
    if not train or not evals:
        p.error("no train*.tsv or eval*.tsv in %s" % args.data_dir)
    train_x = [(int(parts[0]), features(parts, args.buckets)) for parts in read_lines(train)]
    eval_x = [(int(parts[0]), features(parts, args.buckets)) for parts in read_lines(evals)]
    counts = {}
    for parts in read_lines(train):
        for f in range(26):
            key = (f, parts[14 + f])
            counts[key] = counts.get(key, 0) + 1
    once = sum(1 for c in counts.values() if c == 1)
    print("train %d lines, eval %d lines; %d distinct ids, %.1f%% seen once" % (
        len(train_x), len(eval_x), len(counts), 100.0 * once / max(1, len(counts))))
    w = [0.0] * args.buckets
    g2 = [1e-6] * args.buckets
    for epoch in range(1, args.epochs + 1):
        for label, x in train_x:
            p_hat = sigmoid(sum(w[i] for i in x))
            g = p_hat - label
            gg = g * g
            for i in x:
                g2[i] += gg
                w[i] -= args.lr * g / math.sqrt(g2[i])
        labels, scores, loss = [], [], 0.0
        for label, x in eval_x:
            s = sigmoid(sum(w[i] for i in x))
            labels.append(label)
            scores.append(s)
            loss -= math.log(s if label else 1 - s)
        print("HASHED_LR epoch=%d eval_auc=%.6f eval_logloss=%.6f" % (
            epoch, auc(labels, scores), loss / len(labels)), flush=True)


if __name__ == "__main__":
    main()
