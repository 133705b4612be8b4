#!/usr/bin/env python3
"""Where a node profile's samples go, by phase: `perf/profile_summary.py FOLDED [CPU_US_PER_MSG]`.

Reads a folded-stack file written by `perf/flamegraph.sh node` and prints a markdown table:
each phase's share of the node's samples, kernel and user apart. Given the node's CPU per
message measured without the profiler (`perf/peers.sh` reports it, from /proc), it also
splits that figure by the shares: the profiler itself slows the node, so its own run's
rate would overstate the cost of every phase.
A stack goes to the first phase whose rule matches it, in the order listed.
"""
import collections
import sys

KERNEL_MARKS = ("entry_SYSCALL", "asm_exc_", "asm_sysvec_", "asm_common_interrupt")

# (phase, kernel?, any of these substrings in the stack)
RULES = [
    ("fsync (io_uring worker thread)", True, ("io_wq_worker",)),
    ("CommitLog write into the page cache", True, ("MappedWrites::write", "write_all_at")),
    ("TCP send (with the loopback delivery to the client)", True, ("sendto", "flush_held")),
    ("TCP receive", True, ("recvfrom", "poll_read", "ksys_read")),
    ("epoll and wakeups", True, ("epoll_wait", "eventfd")),
    ("other kernel", True, ("",)),
    ("request header decode (JSON)", False, ("json_header::decode",)),
    ("response encode", False, ("json_header::encode", "encode_response")),
    ("send handling: checks, properties, record", False, ("send::prepare_send", "send::checked_header")),
    ("answers: reply commands, batching", False, ("PutSlot::answer", "reply_batch", "PendingSend::finish")),
    ("appender: encode, write, ConsumeQueue", False, ("append::encode", "append::write_chunks", "append::dispatch", "consume_queue")),
    ("connection: framing, admission", False, ("remoting::connection", "remoting::frame")),
    ("runtime (tokio) and other user", False, ("",)),
]


def phase_of(stack):
    kernel = "io_wq_worker" in stack or any(mark in stack for mark in KERNEL_MARKS)
    for name, is_kernel, marks in RULES:
        if is_kernel == kernel and any(mark in stack for mark in marks):
            return name, kernel
    raise AssertionError(f"no rule matched a {'kernel' if kernel else 'user'} stack")


def main():
    path = sys.argv[1]
    per_msg = float(sys.argv[2]) if len(sys.argv) > 2 else None
    totals = collections.Counter()
    kinds = {}
    for line in open(path):
        stack, count = line.rstrip("\n").rsplit(" ", 1)
        name, kernel = phase_of(stack)
        totals[name] += int(count)
        kinds[name] = kernel
    total = sum(totals.values())
    header = "| phase | side | share of samples |" + (" µs per message |" if per_msg else "")
    print(header)
    print("|---|---|---:|" + ("---:|" if per_msg else ""))
    for name, _, _ in RULES:
        if name not in totals:
            continue
        share = totals[name] / total
        row = f"| {name} | {'kernel' if kinds[name] else 'user'} | {share:.1%} |"
        if per_msg:
            row += f" {share * per_msg:.2f} |"
        print(row)
    kernel = sum(v for k, v in totals.items() if kinds[k]) / total
    print(f"\nKernel {kernel:.0%}, user {1 - kernel:.0%} of {total:,} sample weight.")


if __name__ == "__main__":
    main()
