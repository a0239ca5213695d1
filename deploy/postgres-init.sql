-- The fleetval verdict store lives beside (not inside) Airflow's metadata database.
CREATE ROLE fleetval LOGIN PASSWORD 'fleetval';
CREATE DATABASE fleetval OWNER fleetval;
