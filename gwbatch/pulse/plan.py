"""The boxcar decimation plan (AstroAccelerate's scheme, configurable as its PR #113 asked).

Round 0 runs boxcars of widths 1..n0 on the full-rate series.  Round r >= 1 first decimates the
previous round's series by 2 (sums of sample pairs), then runs ``n_r`` further widths that continue
where the previous round stopped: in decimated samples ``W_{r-1}/2^r + 1 ... W_{r-1}/2^r + n_r``,
i.e. original widths up to ``W_r = 2^r (W_{r-1}/2^r + n_r)``.  ``[32, 16, 16, 16]`` gives widths
1..32, 34..64, 68..128 and 136..256 samples; boxcar starts of round r fall every 2^r samples.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BoxcarRound:
    """One round: decimation factor and the first/last boxcar width in decimated samples."""

    decimation: int
    first_width: int
    last_width: int

    @property
    def n_widths(self) -> int:
        return self.last_width - self.first_width + 1

    @property
    def max_width_samples(self) -> int:
        return self.last_width * self.decimation


@dataclass(frozen=True)
class BoxcarPlan:
    rounds: tuple[BoxcarRound, ...]

    @property
    def max_width(self) -> int:
        """The widest boxcar in original samples."""
        return self.rounds[-1].max_width_samples

    @property
    def widths(self) -> list[int]:
        """Every boxcar width searched, in original samples."""
        return [w * r.decimation for r in self.rounds for w in range(r.first_width, r.last_width + 1)]


def boxcar_plan(widths_per_round: list[int] | tuple[int, ...]) -> BoxcarPlan:
    """Build the plan from the YAML list of widths per round; explain a list that cannot work."""
    if not widths_per_round:
        raise ValueError("the decimation plan needs at least one round")
    rounds = []
    prev_max = 0  # widest boxcar so far, original samples
    for r, n in enumerate(widths_per_round):
        if n < 1:
            raise ValueError(f"round {r} has {n} widths; each round needs at least 1")
        d = 1 << r
        if prev_max % d:
            raise ValueError(
                f"round {r} (decimation {d}) cannot continue from width {prev_max}: the widest boxcar of "
                f"round {r - 1} must be a multiple of {d} samples; make the earlier rounds' counts even"
            )
        first = prev_max // d + 1
        last = prev_max // d + n
        rounds.append(BoxcarRound(d, first, last))
        prev_max = last * d
    return BoxcarPlan(tuple(rounds))
