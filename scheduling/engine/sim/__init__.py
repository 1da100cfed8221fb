"""The simulator: replays a trace through the engine in simulated time, without a database.

``load_scenario``/``load_trace`` read the files (errors name the file, line and field),
``Simulator`` runs the event loop, ``output`` writes the contract JSON, events CSV and plot.
"""

from scheduling.engine.sim.scenario import InputError, Scenario, TraceJob, load_scenario, load_trace
from scheduling.engine.sim.simulator import SimResult, Simulator, simulate

__all__ = [
    "InputError",
    "Scenario",
    "SimResult",
    "Simulator",
    "TraceJob",
    "load_scenario",
    "load_trace",
    "simulate",
]
