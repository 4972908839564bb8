"""The fleet health page and the metrics route: a FastAPI app, mounted in the Airflow api-server by
``cluster_doctor.airflow.plugin``.

May import: the layers below (``reports``, ``kube``, ``store``, ``domain``), FastAPI and Airflow's
auth manager. How settings and the database are reached is handed in by whoever creates the app.
"""
