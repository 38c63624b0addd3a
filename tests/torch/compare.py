"""compare.py — compares two results files of suite.py.

    compare.py LOOM_RESULTS GLOO_RESULTS [EXPECTED_COUNT]

Prints the counts of each backend (ran, passed, skipped, failed, error) and
every test that passed with gloo but failed, errored or did not report with
loom; exits 1 if there is one (but for TORCH_LIMITS), or if a file holds fewer than EXPECTED_COUNT
tests (a run cut short).
"""
import sys

# Tests that no backend registered from outside torch can pass, whatever it
# does, with torch's reason. Listed, not counted as failures.
TORCH_LIMITS = {
    "test_ddp_logging_data_cpu": "DDP's logging data names the backend by "
    "ProcessGroup::getBackendName, which is \"custom\" for every backend registered "
    "with dist.Backend.register_backend; the test expects dist.get_backend()",
}


def load(path):
    results = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) >= 2:
                results[parts[1]] = (parts[0], parts[2] if len(parts) > 2 else "")
    return results


def counts(name, results):
    n = {o: 0 for o in ("passed", "skipped", "failed", "error")}
    for outcome, _ in results.values():
        n[outcome] += 1
    print(f"compare: {name}: {len(results)} ran, {n['passed']} passed, {n['skipped']} skipped, "
          f"{n['failed']} failed, {n['error']} errors")


def main():
    loom, gloo = load(sys.argv[1]), load(sys.argv[2])
    expected = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    counts("loom", loom)
    counts("gloo", gloo)
    bad = 0
    for name, (outcome, why) in sorted(gloo.items()):
        if outcome != "passed":
            continue
        got, lwhy = loom.get(name, ("missing", "no result from loom"))
        if got in ("failed", "error", "missing") and name in TORCH_LIMITS:
            print(f"compare: {name}: {got} with loom, a limit of torch's: {TORCH_LIMITS[name]}")
        elif got in ("failed", "error", "missing"):
            print(f"compare: {name}: passed with gloo, {got} with loom: {lwhy}")
            bad += 1
    for name, results in (("loom", loom), ("gloo", gloo)):
        if len(results) < expected:
            print(f"compare: {name} reported {len(results)} tests of {expected}")
            bad += 1
    lost = sorted(n for n, (o, _) in gloo.items() if o == "passed" and loom.get(n, ("",))[0] == "skipped")
    if lost:
        print(f"compare: passed with gloo, skipped with loom: {' '.join(lost)}")
    gained = sorted(n for n, (o, _) in loom.items() if o == "passed" and gloo.get(n, ("",))[0] != "passed")
    if gained:
        print(f"compare: passed with loom, not with gloo: {' '.join(gained)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
