"""Where the benchmark's independent simulations run (issue #39, "Scale-out"): one dispatcher for
``cpgym benchmark tune`` (a batch of trials) and ``cpgym benchmark run`` (the episodes of a task's
contenders).

:class:`Dispatcher` maps a function over argument tuples, results in input order:

* ``backend="local"``, ``jobs=1``: in this process, one after the other;
* ``backend="local"``, ``jobs > 1``: a pool of ``jobs`` spawned processes, kept until
  :meth:`Dispatcher.close`; the function and each argument tuple travel cloudpickled (a lambda, a
  closure or a policy built in Python goes as it is; cloudpickle comes with gymnasium); an item
  that cannot be pickled (e.g. a learned reconfiguration policy's ``VecNormalize``) runs in this
  process, in its turn;
* ``backend="ray"``: Ray tasks of one CPU each. Unless Ray is already initialised it starts a
  local instance (``num_cpus=jobs``, no dashboard) as ``cpgym sweep --backend ray`` does
  (``experiments/sweep/backends.py``): its session folder in a fresh temporary folder removed at
  close, its authentication token in this process's environment only, until close. Ray is
  imported only here (a local run never needs it).

Every call is independent of the others (the simulator is seeded per run), so the results do not
depend on the backend or on ``jobs`` (``tests/benchmark/test_dispatch.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Sequence

#: The backends of :class:`Dispatcher`.
BACKENDS = ("local", "ray")


def _call_pickled(blob: bytes):
    import cloudpickle  # third-party: loaded only in a pool worker

    fn, args = cloudpickle.loads(blob)
    return fn(*args)


def _call(fn: Callable, *args):
    return fn(*args)


class Dispatcher:
    """Maps ``fn`` over argument tuples on ``backend`` with ``jobs`` workers (module docstring);
    a context manager (``close`` on exit).

    Raises:
        ValueError: on an unknown backend or ``jobs`` < 1.
    """

    def __init__(self, fn: Callable, backend: str = "local", jobs: int = 1) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
        self.fn, self.backend, self.jobs = fn, backend, jobs
        self.ex = self.ray = None
        self.started, self.temp_dir, self.env_before = False, None, {}
        if backend == "ray":
            self._start_ray()

    def _start_ray(self) -> None:
        import secrets
        import tempfile

        import ray  # third-party, optional (extra "ray"): only a --backend ray run loads it

        self.ray = ray
        self.env_before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
        if not ray.is_initialized():
            self.temp_dir = tempfile.mkdtemp(prefix="cpgym-ray-", dir="/tmp")  # short: Ray's socket paths
            if self.env_before["RAY_AUTH_MODE"] is None and self.env_before["RAY_AUTH_TOKEN"] is None:
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
            ray.init(num_cpus=self.jobs, include_dashboard=False, log_to_driver=False, _temp_dir=self.temp_dir)
            self.started = True
        self.remote = ray.remote(num_cpus=1, max_retries=0)(_call)

    def imap(self, items: Sequence[tuple]) -> Iterator:
        """``fn(*item)`` of each item, yielded in input order (as soon as each is ready)."""
        items = list(items)
        if self.backend == "ray":
            refs = [self.remote.remote(self.fn, *args) for args in items]
            for ref in refs:
                yield self.ray.get(ref)
        elif self.jobs == 1 or len(items) <= 1:
            for args in items:
                yield self.fn(*args)
        else:
            if self.ex is None:
                import multiprocessing as mp
                from concurrent.futures import ProcessPoolExecutor

                import cloudpickle  # third-party (a gymnasium dependency): only a pool needs it

                self.ex = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"))
                self.dumps = cloudpickle.dumps
            jobs = []
            for args in items:
                try:
                    jobs.append(self.ex.submit(_call_pickled, self.dumps((self.fn, tuple(args)))))
                except Exception:  # noqa: BLE001 (cloudpickle raises what an object's __getstate__ raises)
                    jobs.append(None)  # cannot travel (e.g. a learned policy's VecNormalize): runs here, in order
            for job, args in zip(jobs, items):
                yield self.fn(*args) if job is None else job.result()

    def __call__(self, items: Sequence[tuple]) -> list:
        """``[fn(*item) for item in items]`` (module docstring: where they run)."""
        return list(self.imap(items))

    def close(self) -> None:
        """Stops the pool or the Ray instance this dispatcher started (and restores the environment)."""
        if self.ex is not None:
            self.ex.shutdown(wait=True, cancel_futures=True)
            self.ex = None
        if self.started:
            self.ray.shutdown()
            self.started = False
        for k, v in self.env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.env_before = {}
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
