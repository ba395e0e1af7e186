#!/usr/bin/env python3
"""Checks, position by position, which samples the runs of one epoch trained on.

    epoch_audit.py N EPOCH REF_DIR REF_NP END RUN_DIR:NP:START[:STOP] [...]

The epoch is the sequence of positions 0, 1, ... of its permutation P (hvx/data/shard_plan.h);
rank r of a run that starts at position START with NP ranks trains positions START + r,
START + r + NP, ... in the order of its sample log (DIR/rank<r>-epoch<EPOCH>.txt, one id per
line, " pad" after a padding duplicate). With STOP, only its positions before STOP count: a run
that failed after its last checkpoint at STOP trained the later ones for nothing, and the run that
resumed from that checkpoint trains them again. REF_DIR holds the logs of a run with REF_NP ranks that
trained every position of the epoch once, from which P is read.

Passes when every logged id is P at its position (padding exactly at positions >= N), the runs'
positions are disjoint, and together they are exactly [0, END). Prints one line per failure and
exits with their count (at most 100).
"""
import os
import sys


def read_log(path):
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def rank_logs(directory, np_, epoch):
    logs = []
    for r in range(np_):
        path = os.path.join(directory, "rank%d-epoch%d.txt" % (r, epoch))
        if not os.path.exists(path):
            return None, "missing %s" % path
        logs.append(read_log(path))
    return logs, None


def main(argv):
    n, epoch, ref_dir, ref_np, end = int(argv[1]), int(argv[2]), argv[3], int(argv[4]), int(argv[5])
    failures = []
    ref, err = rank_logs(ref_dir, ref_np, epoch)
    if err:
        print("FAIL: reference: " + err)
        return 1
    perm = [None] * n
    for r, lines in enumerate(ref):
        for i, fields in enumerate(lines):
            pos = r + i * ref_np
            if pos < n:
                perm[pos] = int(fields[0])
    if None in perm or sorted(perm) != list(range(n)):
        print("FAIL: the reference run did not train every position of epoch %d once" % epoch)
        return 1

    trained = {}  # position -> the run that trained it
    for spec in argv[6:]:
        fields = spec.split(":")
        stop = None
        if len(fields) == 4:
            stop = int(fields.pop())
        directory, np_, start = fields[0], int(fields[1]), int(fields[2])
        logs, err = rank_logs(directory, np_, epoch)
        if err:
            failures.append(err)
            continue
        if stop is not None:
            logs = [[f for i, f in enumerate(lines) if start + r + i * np_ < stop]
                    for r, lines in enumerate(logs)]
        counts = sorted({len(lines) for lines in logs})
        if len(counts) != 1:
            failures.append("%s: ranks trained on different numbers of samples: %s"
                            % (directory, [len(lines) for lines in logs]))
        for r, lines in enumerate(logs):
            for i, fields in enumerate(lines):
                pos = start + r + i * np_
                want = perm[pos % n]
                padded = len(fields) > 1 and fields[1] == "pad"
                if int(fields[0]) != want or padded != (pos >= n):
                    failures.append("%s rank %d line %d: sample %s, expected %d%s at position %d"
                                    % (directory, r, i + 1, " ".join(fields), want,
                                       " pad" if pos >= n else "", pos))
                if pos in trained:
                    failures.append("position %d (sample %d) trained twice: by %s and %s"
                                    % (pos, want, trained[pos], directory))
                trained[pos] = directory
    missing = [p for p in range(end) if p not in trained]
    extra = sorted(p for p in trained if p >= end)
    if missing:
        failures.append("%d positions before %d not trained, the first %s (samples %s)"
                        % (len(missing), end, missing[:5], [perm[p % n] for p in missing[:5]]))
    if extra:
        failures.append("%d positions at or past %d trained, the first %s" % (len(extra), end, extra[:5]))
    for line in failures[:20]:
        print("FAIL: " + line)
    if not failures:
        print("ok: epoch %d: positions 0..%d trained once each, %d left out" % (epoch, end - 1, max(0, n - end)))
    return min(len(failures), 100)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
