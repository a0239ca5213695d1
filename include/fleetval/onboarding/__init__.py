"""Rack onboarding: new GPU nodes enter service only after every layer's checks pass, or a human
approves what warned.

- `request`: what the operator asked for (the `rack_onboarding` form), checked again at run time;
- `plan`: which nodes (a rack, a node list, a label selector), which are refused and why, the
  onboarding taint and the in-service label;
- `registry` + `stages`: the layers' checks in order (operator and isolation, DCGM, NCCL on each
  node, NCCL pairs, then whatever layer is registered next), a node leaving the funnel at its
  first fail, error or inconclusive;
- `gate`: the pure judge over the stages' verdicts, per node: pass, warn (a human decides), fail,
  error, inconclusive, with the findings that decided it;
- `approval`: the human-in-the-loop question (Markdown evidence, options, the default "hold") and
  the reading of its answer;
- `baselines`: NCCL baseline candidates from the first rack of a new profile, promoted only by an
  answer;
- `actions`: the taint, labels and node events; `report`: the summary.

This package never imports Airflow; `fleetval_airflow.onboarding_tasks` calls it.
"""
