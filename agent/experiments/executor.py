"""Executing independent jobs: in this process, or as Ray tasks on a local instance or a cluster.

One interface, `Executor.run(jobs, on_done) -> outcomes` (in the jobs' order; `on_done(i, outcome)`
as each job ends, in the caller's process, for progress), with two implementations,
so `agent compare` (one job per (policy, seed) episode) and `agent retrospective` (one job per
cell) run the same job functions whichever executor runs them:
- `LocalExecutor(n_jobs)`: one job after another in this thread (n_jobs 1), else a pool of
  n_jobs threads (for jobs that only wait on subprocesses, as compare's episodes do);
- `RayExecutor(resources)`: each job one Ray task holding `resources` (`task_resources` derives
  them from the run config), inside a `session` that connects to a cluster or starts a local
  Ray instance. Ray is imported only there, so the local path never needs it installed.

A job that raises becomes an `Outcome` with its error ("Type: message", the same text from
either executor) and touches no other job. No job is retried (Ray's `max_retries=0`): a failure
is recorded and the caller's resume (its jobs skip finished work) is the retry. Jobs hand their
results back and write everything else to files, so on a cluster every worker must see the
caller's directories at the same paths (a shared filesystem); a task runs in the caller's
working directory, so relative paths mean the same there.

Out of scope: a job spanning nodes (a task's GPUs are on one node), autoscaling (a request that
no node alive at the start can hold is refused before any job runs), and cancelling tasks in
flight when the caller is interrupted (the shutdown of a local instance ends them; on a
cluster they run on, and the episodes' run locks and the cells' step locks keep a second run
from doing their work twice).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from experience_bank.errors import BadInput

from agent.world.portable import NUMERICS_VAR

if TYPE_CHECKING:
    from agent.config import RunConfig

FORWARDED_ENV = ("AGENT_CACHE", "AGENT_RUN_CACHE", "AGENT_NO_CACHE", NUMERICS_VAR)
"""Variables a Ray task gets from the caller's environment (where the caches are, whether the
run cache is off, how worlds are built: a worker must load the caller's world, not build a
native one); a subprocess of the local executor inherits them anyway."""
CONNECT_TIMEOUT_S = 5.0
"""How long `session` waits for a TCP connection to --address before it says it cannot reach it."""


@dataclass(frozen=True)
class Job:
    """One independent unit of work: `fn(*args)`, run where the executor places it."""

    fn: Callable[..., Any]
    """Module-level (a Ray worker imports it by name); returns what the caller records."""
    args: tuple = ()
    """Picklable arguments (paths, records); never models or open files."""


@dataclass(frozen=True)
class Outcome:
    """What one job came to: its value, or the error it raised."""

    value: Any = None
    """fn's return value (None when it raised)."""
    error: str | None = None
    """'Type: message' of the exception the job raised; None when it returned."""


OnDone = Callable[[int, Outcome], None]
"""on_done(index of the job in the list run was given, its outcome)."""


@dataclass(frozen=True)
class Resources:
    """What one Ray task holds while it runs."""

    cpus: int = 1
    """Logical CPUs (Ray sets the task's OMP_NUM_THREADS to this unless the environment sets it)."""
    gpus: int = 0
    """GPUs on one node; 0 = the task is shown none."""


class Executor(Protocol):
    """Runs independent jobs and reports each one's outcome, in the jobs' order."""

    name: ClassVar[str]

    def run(self, jobs: list[Job], on_done: OnDone | None = None) -> list[Outcome]:
        """Every job's Outcome; a job that raises never stops the others. `on_done(i, outcome)` is
        called in the caller's process as each job ends (in the order they end), e.g. for progress."""


def task_resources(cfg: RunConfig) -> Resources:
    """What one episode (or cell) of this run config holds on Ray.

    CPUs: `torch_threads`, the threads it trains and generates with. GPUs: `devices` when the
    config is a GPU profile (vLLM generation, the accelerate launcher, or measured cost, which
    charges wall-clock x devices: the devices reserved are then the devices charged), else none.
    A nominal-cost config (the embedded and smol worlds) is a CPU run, and a task granted no GPU
    is shown none (CUDA_VISIBLE_DEVICES empty), so it cannot take a device another task holds
    (the local executor hides nothing: on a GPU machine its runs use what torch finds there).
    """
    gpu = cfg.backend == "vllm" or cfg.launcher == "accelerate" or cfg.cost_mode == "measured"
    return Resources(cpus=cfg.torch_threads, gpus=cfg.devices if gpu else 0)


def task_env(resources: Resources) -> dict[str, str]:
    """The environment variables a Ray task is started with (runtime_env env_vars)."""
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    return env | ({"CUDA_VISIBLE_DEVICES": ""} if resources.gpus == 0 else {})


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _call(job: Job) -> Outcome:
    try:
        return Outcome(value=job.fn(*job.args))
    except Exception as exc:  # noqa: BLE001 (one job's crash must not end the others)
        return Outcome(error=error_text(exc))


@dataclass(frozen=True)
class LocalExecutor:
    """Jobs in this process: in order in this thread (n_jobs 1), else n_jobs threads at once."""

    n_jobs: int = 1
    name: ClassVar[str] = "local"

    def run(self, jobs: list[Job], on_done: OnDone | None = None) -> list[Outcome]:
        report = on_done or (lambda i, o: None)
        outcomes: dict[int, Outcome] = {}
        if self.n_jobs == 1:
            for i, job in enumerate(jobs):
                outcomes[i] = _call(job)
                report(i, outcomes[i])
        else:
            with ThreadPoolExecutor(max_workers=self.n_jobs) as pool:  # threads only wait on subprocesses
                futures = {pool.submit(_call, job): i for i, job in enumerate(jobs)}
                for future in as_completed(futures):
                    outcomes[futures[future]] = future.result()  # _call never raises
                    report(futures[future], outcomes[futures[future]])
        return [outcomes[i] for i in range(len(jobs))]


def _in_dir(cwd: str, fn: Callable[..., Any], *args: Any) -> Any:
    """A job on a Ray worker, in the caller's working directory (a cluster's worker starts elsewhere)."""
    os.chdir(cwd)
    return fn(*args)


@dataclass(frozen=True)
class RayExecutor:
    """Jobs as Ray tasks holding `resources` each, on the Ray session this process has open
    (`session`, or the caller's own `ray.init`)."""

    resources: Resources = field(default_factory=Resources)
    name: ClassVar[str] = "ray"

    def run(self, jobs: list[Job], on_done: OnDone | None = None) -> list[Outcome]:
        import ray  # noqa: PLC0415 (only with --executor ray)

        if not ray.is_initialized():
            raise RuntimeError("RayExecutor.run needs an open Ray session (executor.session or ray.init)")
        task = ray.remote(_in_dir).options(num_cpus=self.resources.cpus, num_gpus=self.resources.gpus, max_retries=0,
                                           runtime_env={"env_vars": task_env(self.resources)})
        report = on_done or (lambda i, o: None)
        outcomes: dict[int, Outcome] = {}
        refs: dict[Any, int] = {}
        for i, job in enumerate(jobs):  # every task is submitted before any is waited on: they run side by side
            try:
                refs[task.remote(os.getcwd(), job.fn, *job.args)] = i
            except Exception as exc:  # noqa: BLE001 (e.g. an argument that cannot be pickled: that job fails)
                outcomes[i] = Outcome(error=error_text(exc))
                report(i, outcomes[i])
        waiting = list(refs)
        while waiting:
            [ref], waiting = ray.wait(waiting, num_returns=1)
            outcomes[refs[ref]] = _wait(ray, ref)
            report(refs[ref], outcomes[refs[ref]])
        return [outcomes[i] for i in range(len(jobs))]


def _wait(ray: Any, ref: Any) -> Outcome:
    try:
        return Outcome(value=ray.get(ref))
    except ray.exceptions.RayTaskError as exc:  # the job raised: record what it raised, as LocalExecutor does
        return Outcome(error=error_text(exc.cause if exc.cause is not None else exc))
    except ray.exceptions.RayError as exc:  # its worker or node died, or it could not start
        return Outcome(error=error_text(exc))


# --- progress of a batch that runs for hours ---------------------------------------------------


def progress_line(where: str, what: str, ended: int, total: int, name: str, how: str, *, left: int,
                  eta_s: float | None) -> str:
    """One line for a job that ended: what it came to, how many are left, and when they should end
    (`eta_s`, Progress.eta_s; none before one has run)."""
    line = f"{where}: {ended}/{total} {what} ended ({name}: {how})"
    if left and eta_s is not None:
        line += f"; {left} to run, about {eta_s / 3600:.1f} h at the pace so far"
    return line


def eta_s(elapsed_s: float, ran: int, left: Counter[str], walls: dict[str, list[float]]) -> float | None:
    """Seconds until the `left` jobs (count per group) end, at the pace of the `ran` jobs run so far
    in `elapsed_s` (parallel jobs included, whichever executor ran them; None before one has run).
    Where the jobs' own wall-clocks are known (`walls`, per group), a job left is expected to take
    its group's mean (the mean of all where its group has not run yet), scaled by the parallelism
    seen (elapsed over the sum of the walls): a comparison's first policy of a seed trains and
    evaluates what the others then take from the run cache, so one pace for all misleads by 5x."""
    if not ran:
        return None
    done = [w for ws in walls.values() for w in ws]
    if not done or sum(done) <= 0:
        return elapsed_s / ran * sum(left.values())
    mean = sum(done) / len(done)
    need = sum(n * (sum(walls[g]) / len(walls[g]) if walls.get(g) else mean) for g, n in left.items())
    return elapsed_s * need / sum(done)


@dataclass
class Progress:
    """Progress lines of one batch of jobs: `begin` before any runs, `end` as each ends (the
    executor's on_done); `total` jobs, of which `before` had ended before this call (taken from
    a results directory, or finished by an earlier call). `names` (the jobs to run) and `group`
    (a job name's group) let the estimate follow each group's own pace (eta_s)."""

    where: str
    what: str
    total: int
    before: int
    say: Callable[[str], None]
    names: list[str] = field(default_factory=list)
    group: Callable[[str], str] = lambda name: ""
    ran: int = 0
    ended: int = 0
    start: float = field(default_factory=time.monotonic)
    walls: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pending = Counter(self.group(n) for n in self.names)

    def begin(self) -> None:
        self.say(f"{self.where}: {self.total} {self.what}, {self.before} finished before, "
                 f"{self.total - self.before} to run")

    def end(self, name: str, how: str, *, ran: bool, wall_s: float | None = None) -> None:
        """`ran`: it did its work now (a job that found its work done counts as ended, not as pace);
        `wall_s`: its own wall-clock, where known."""
        self.ended, self.ran = self.ended + 1, self.ran + ran
        if ran and wall_s is not None:
            self.walls.setdefault(self.group(name), []).append(wall_s)
        left = self.total - self.before - self.ended
        self.pending[self.group(name)] -= name in self.names
        pending = self.pending if self.names else Counter({"": left})
        self.say(progress_line(self.where, self.what, self.before + self.ended, self.total, name, how, left=left,
                               eta_s=eta_s(time.monotonic() - self.start, self.ran, pending, self.walls)))


def say_on_stderr(prefix: str) -> Callable[[str], None]:
    """Progress of a long command on stderr (stdout stays the command's result)."""
    return lambda line: print(f"[{prefix}] {line}", file=sys.stderr, flush=True)


# --- opening an executor for one command -------------------------------------------------------


def _import_ray() -> Any:
    try:
        import ray  # noqa: PLC0415
    except ImportError:
        raise BadInput("--executor ray needs Ray: pip install 'ray[client]==2.60.0' (pyproject.toml's pin)") from None
    return ray


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """BadInput unless a TCP connection to the address's host and port opens within timeout_s.
    Ray's own connect retries for 30 s (ray://) or minutes (a GCS address) before it gives up."""
    if address == "auto":  # ray.init finds this machine's cluster from its session files
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"--address {address!r}: give ray://HOST:PORT (Ray Client), HOST:PORT (the head's GCS) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BadInput(f"the Ray cluster at {address} cannot be reached ({exc.strerror or exc}): start its head "
                       "(ray start --head) or fix --address") from None


def _connect(ray: Any, address: str | None, num_cpus: int) -> bool:
    """Connect to `address`, or start a local instance of num_cpus CPUs; True when this call
    started the session (and so ends it). A session already open (a test's, a notebook's) is used."""
    if address:
        check_reachable(address)
    if ray.is_initialized():
        return False
    try:
        # "local": a new instance even where RAY_ADDRESS or an earlier `ray start` names a cluster
        ray.init(**({"address": address} if address else {"address": "local", "num_cpus": num_cpus}),
                 include_dashboard=False)
    except (ConnectionError, RuntimeError, ImportError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if not address:
            raise BadInput(f"cannot start a local Ray instance: {first}") from None
        # Ray 2.60 clusters check a token by default, and an explicit address never reads it on its own
        raise BadInput(f"cannot connect to the Ray cluster at {address}: {first} (a cluster with token authentication "
                       "needs RAY_AUTH_MODE=token and its token, RAY_AUTH_TOKEN or ~/.ray/auth_token, here)") from None
    return True


def check_fits(nodes: list[dict], resources: Resources) -> None:
    """BadInput unless an alive node (ray.nodes()) can hold one task: Ray would wait for one forever."""
    if not any(n["Alive"] and n["Resources"].get("CPU", 0) >= resources.cpus
               and n["Resources"].get("GPU", 0) >= resources.gpus for n in nodes):
        raise BadInput(f"no node of the Ray cluster has {resources.cpus} CPUs and {resources.gpus} GPUs for one task "
                       "(the run config's torch_threads and devices): add such a node or lower them")


@contextmanager
def session(name: str, *, address: str | None = None, jobs: int | None = None,
            resources: Resources = Resources()) -> Iterator[Executor]:
    """The executor a command runs its jobs on, open for the command's life.

    `ray` without an address starts a new local instance of jobs x resources.cpus CPUs (all of
    this machine's when jobs is None; RAY_ADDRESS is not read: `--address auto` joins this
    machine's cluster), so `--jobs` bounds the episodes at once as it does locally, and ends it
    afterwards; with an address it connects to that cluster, whose nodes bound them.
    Every error a user can fix (Ray missing, an address nothing answers at, no node big enough)
    is BadInput before any job runs."""
    if name == "local":
        if address:
            raise BadInput("--address is the Ray cluster's: pass it with --executor ray")
        yield LocalExecutor(jobs or 1)
        return
    if name != "ray":
        raise BadInput(f"--executor {name!r}: choose local or ray")
    ray = _import_ray()
    started = _connect(ray, address, max(jobs * resources.cpus if jobs else os.cpu_count() or 1, resources.cpus))
    try:
        check_fits(ray.nodes(), resources)
        yield RayExecutor(resources)
    finally:
        if started:
            ray.shutdown()
