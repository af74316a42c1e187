"""A deterministic synthetic scheduler loop over a session (in-process
``Session`` or the client's ``RemoteSession``): arrivals, rounds, progress at
the jobs' throughputs, early finishes. Its requests depend only on the seed
and the answers it got, so two sessions that answer alike receive identical
requests — what the durability tests and the load bench need."""

from __future__ import annotations

import random

CLUSTER = {"gpus": {"v100": 4, "p100": 4, "k80": 4}}
MODELS = (("resnet18", {"v100": 22.0, "p100": 14.0, "k80": 5.5}),
          ("resnet50", {"v100": 9.5, "p100": 5.1, "k80": 1.6}),
          ("transformer", {"v100": 7.8, "p100": 4.2, "k80": 1.2}),
          ("lm", {"v100": 30.0, "p100": 21.0, "k80": 9.0}),
          ("recsys", {"v100": 40.0, "p100": 36.0, "k80": 20.0}))


def job_stream(seed: int, prefix: str = "j"):
    """Endless jobs: scale factor 1/2/4, a model's throughputs, 2–12 rounds of work at 360 s."""
    rng = random.Random(seed)
    i = 0
    while True:
        name, thr = MODELS[rng.randrange(len(MODELS))]
        sf = rng.choices((1, 2, 4), weights=(0.7, 0.2, 0.1))[0]
        rounds = rng.uniform(2, 12)
        yield {"id": f"{prefix}{i:04d}", "model": name, "scale_factor": sf, "throughput": dict(thr),
               "steps_total": round(thr["v100"] * 360 * rounds), "weight": rng.choice((1.0, 1.0, 2.0))}
        i += 1


class Driver:
    """The loop's memory: its rng, its job stream, the jobs it submitted, the last round."""

    def __init__(self, seed: int = 0, round_length: float = 360.0, arrivals: float = 1.5, prefix: str = "j"):
        self.rng, self.jobs = random.Random(seed), job_stream(seed, prefix)
        self.known: dict[str, dict] = {}
        self.last: dict | None = None
        self.round_length, self.arrivals = round_length, arrivals

    def before_round(self, session) -> None:
        """Report the last round's progress (some jobs stop early and say how long
        they ran; jobs reaching steps_total finish) and submit arrivals."""
        rng = self.rng
        if self.last is not None:
            reports = []
            for jid, slots in sorted(self.last["placement"].items()):
                thr = self.known[jid]["throughput"][slots[0]["gpu_type"]]
                if rng.random() < 0.15:  # stopped early (failure, eviction): a partial round
                    secs = round(rng.uniform(0.1, 0.9) * self.round_length, 3)
                    reports.append({"job_id": jid, "steps": thr * secs, "seconds": secs})
                else:
                    reports.append({"job_id": jid, "steps": thr * self.round_length})
            if reports:
                session.report(reports)
        n = _poisson(rng, self.arrivals)
        if n:
            new = [next(self.jobs) for _ in range(n)]
            self.known.update((j["id"], j) for j in new)
            session.submit(new)

    def next_round(self, session) -> dict:
        self.last = session.next_round()
        return self.last

    def step(self, session) -> dict:
        self.before_round(session)
        return self.next_round(session)


def run(session, rounds: int, seed: int = 0, driver: Driver | None = None) -> tuple[list[dict], Driver]:
    """Drive ``rounds`` iterations (continuing ``driver`` when given)."""
    driver = driver or Driver(seed)
    return [driver.step(session) for _ in range(rounds)], driver


def _poisson(rng: random.Random, lam: float) -> int:
    # Knuth; small lambda
    import math

    L, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= L:
            return k
        k += 1
