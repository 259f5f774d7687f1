"""The hazard-mutation benchmark's parts (``benchmarks/mutants.py`` drives them).

* :mod:`.subjects`: the subjects (graphsafe's safe targets) and what a subject's buffers are (a profile);
* :mod:`.operators`: the hazard operators, each making a subclass of a subject at run time;
* :mod:`.truth`: ground truth by replay against a fresh eager instance per step, without graphsafe's diagnosis.
"""
