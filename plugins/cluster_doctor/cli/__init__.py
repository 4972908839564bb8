"""``cluster-doctor`` (also ``python -m cluster_doctor``): the command line, the outermost layer.

May import every layer; imports ``cluster_doctor.airflow`` only lazily, to resolve the Airflow
connection ``validation_db`` when Airflow is installed.
"""
