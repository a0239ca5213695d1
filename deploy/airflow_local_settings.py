"""Airflow local settings for fleetval's Airflow: every Airflow process imports this module at
start-up (from $AIRFLOW_HOME/config; the image puts it there, the Helm values mount it there).

The KubernetesPodOperator's module (and the Kubernetes clients under it) is imported once here, in
the scheduler and the workers, instead of in every task: a task process is forked from its worker
and parses its DAG file, and that import was ~2.5 s of every probe, list and judge task on a 2-core
machine (bench/onboarding_overhead.py measures what it saves).
"""

import airflow.providers.cncf.kubernetes.operators.pod  # noqa: F401
