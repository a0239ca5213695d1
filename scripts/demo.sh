#!/usr/bin/env bash
# make demo: Airflow 3 standalone on the embedded default (SQLite + the simulated demo fleet),
# triggers weekly_health_sweep, prints the verdicts, then serves the UI until Ctrl-C.
#   --exit-after-summary   stop Airflow and exit once the summary is printed
set -euo pipefail
cd "$(dirname "$0")/.."
EXIT_AFTER=0
[[ "${1:-}" == "--exit-after-summary" ]] && EXIT_AFTER=1

DEMO=$PWD/.demo
PORT=${FLEETVAL_DEMO_PORT:-8080}
rm -rf "$DEMO"  # every demo starts from an empty store and Airflow home
mkdir -p "$DEMO"
export AIRFLOW_HOME=$DEMO/airflow
export AIRFLOW__CORE__DAGS_FOLDER=$PWD/dags
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM=4
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=15
export AIRFLOW__API__PORT=$PORT
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://localhost:$PORT/execution/
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$DEMO/passwords.json
echo '{"admin": "fleetval"}' > "$DEMO/passwords.json"
FLEETVAL_DB="sqlite:///$DEMO/fleetval.db"
export AIRFLOW_CONN_FLEETVAL_DB="{\"conn_type\": \"generic\", \"extra\": {\"url\": \"$FLEETVAL_DB\"}}"
export AIRFLOW_VAR_FLEETVAL_BACKEND=sim
export AIRFLOW_VAR_FLEETVAL_SIM_FLEET=demo

echo "== fleetval store: $FLEETVAL_DB"
fleetval db upgrade --db "$FLEETVAL_DB" >/dev/null
fleetval sim load include/fleetval/sim/fleets/demo.yaml --db "$FLEETVAL_DB" --reset
echo "== Airflow metadata DB and pools"
airflow db migrate >"$DEMO/migrate.log" 2>&1
airflow pools import pools.json >/dev/null 2>&1
airflow dags reserialize >"$DEMO/reserialize.log" 2>&1

echo "== starting Airflow 3 (standalone) on :$PORT — log: $DEMO/airflow.log"
setsid airflow standalone >"$DEMO/airflow.log" 2>&1 &
AIRFLOW_PID=$!
stop() { kill -TERM -- "-$AIRFLOW_PID" 2>/dev/null || true; wait "$AIRFLOW_PID" 2>/dev/null || true; }
trap 'echo; echo "== stopping Airflow"; stop; exit 0' INT TERM
trap stop EXIT

# Unpausing a scheduled DAG makes Airflow run its latest slot (Sunday 03:00 UTC): the weekly cron
# firing, with the DAG's default budgets. (A manual trigger on top would sweep the fleet twice.)
python scripts/demo_driver.py --port "$PORT" --user admin --password fleetval --dag weekly_health_sweep \
  --unpause xid_remediation --await-run
echo
fleetval verdicts --db "$FLEETVAL_DB"
echo
echo "== an Xid 79 (GPU fell off the bus) on r02-n08 GPU 2: the event wakes xid_remediation"
fleetval sim inject-xid demo --db "$FLEETVAL_DB" --node r02-n08 --code 79 --gpu 2 >/dev/null
python scripts/demo_driver.py --port "$PORT" --user admin --password fleetval --dag xid_remediation \
  --await-run
echo
fleetval verdicts --db "$FLEETVAL_DB"
echo
echo "Airflow UI: http://localhost:$PORT  (login admin / fleetval)"
echo "Verdicts:   fleetval verdicts --db $FLEETVAL_DB [--format json]"
if [[ $EXIT_AFTER == 1 ]]; then
  exit 0
fi
echo "Serving until Ctrl-C."
wait "$AIRFLOW_PID"
