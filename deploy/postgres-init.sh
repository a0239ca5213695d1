#!/bin/bash
# The fleetval verdict store lives beside (not inside) Airflow's metadata database. Run once by
# the postgres image on an empty data folder; the password comes from the environment (compose
# requires FLEETVAL_DB_PASSWORD) and reaches SQL as a psql variable, quoted by psql.
set -euo pipefail
psql -v ON_ERROR_STOP=1 -v password="$FLEETVAL_DB_PASSWORD" \
  --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
CREATE ROLE fleetval LOGIN PASSWORD :'password';
CREATE DATABASE fleetval OWNER fleetval;
SQL
