"""The Airflow glue: the plugin, the validation pod operator, the task bodies of the DAGs, and
reading settings and connections from Airflow's runtime.

With ``cluster_doctor.web`` the only layer that imports Airflow. May import every layer below it
(``web``, ``reports``, ``kube``, ``store``, ``domain``). The DAG files in dags/ only wire these.
"""
