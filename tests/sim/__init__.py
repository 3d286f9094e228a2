"""A deterministic simulator of a Loom deployment, in the manner of FoundationDB's.

Many workers (each a :class:`~loom.runtime.Runtime`) share one store and run the flows of
:mod:`tests.sim.app` on one event loop whose time is virtual and whose scheduler is seeded
(:mod:`tests.sim.loop`). The world is hostile (:mod:`tests.sim.config`): deliveries come
two or three times at once, workers die at any await and stay dead (SIGKILL, no
``finally``), the store stalls, fails and loses the answers of writes it applied
(:mod:`tests.sim.store`), the wall clock jumps. Clients resume, cancel and message
executions; an operator settles what falls in doubt from the ledger of real effect
invocations (:mod:`tests.sim.workloads`). After the run drains, the invariants of
:mod:`tests.sim.invariants` and :mod:`tests.sim.invariants_effects` are checked.

Every run is a function of its seed; a failing one prints the line that reproduces it:
``python -m tests.sim --seed 1234``. Many seeds: ``python -m tests.sim --seeds 500``, or
``python bench/simulate.py --seeds 100000`` for the long mode.

Where to add things:

* a flow or an effect: :mod:`tests.sim.app`;
* a workload (what clients start and do): :mod:`tests.sim.workloads`;
* a fault: :mod:`tests.sim.store` (store calls) or :mod:`tests.sim.config` (its rate);
* an invariant: :mod:`tests.sim.invariants` (logs) or :mod:`tests.sim.invariants_effects`
  (effects and the ledger);
* a scripted race: :mod:`tests.sim.scenarios`.
"""
