# The fleetval Airflow image: the official Apache Airflow 3.3 image plus fleetval's locked run-time
# requirements, the fleetval package (include/), its DAGs and its plugin (the fleet-health page).
# Compose and the Helm values use it.
#   docker build -t fleetval-airflow:0.1.0 .
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}
ARG AIRFLOW_VERSION

# As the image's documentation asks: pip runs as the airflow user, with apache-airflow pinned in the
# same command so that no requirement can move Airflow itself.
COPY --chown=airflow:0 requirements.txt /opt/fleetval/requirements.txt
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /opt/fleetval/requirements.txt

# The package last: a code change rebuilds only these layers. --no-deps: everything it needs is above.
COPY --chown=airflow:0 pyproject.toml README.md /opt/fleetval/
COPY --chown=airflow:0 include /opt/fleetval/include
RUN pip install --no-cache-dir --no-deps /opt/fleetval

COPY --chown=airflow:0 dags /opt/airflow/dags
# The fleet-health page (an api-server plugin: plugins/fleet_health_plugin.py and its package).
COPY --chown=airflow:0 plugins /opt/airflow/plugins
COPY --chown=airflow:0 pools.json /opt/fleetval/pools.json
# Imported by every Airflow process at start-up: tasks fork with the Kubernetes clients loaded.
COPY --chown=airflow:0 deploy/airflow_local_settings.py /opt/airflow/config/airflow_local_settings.py
ENV AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/airflow/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
