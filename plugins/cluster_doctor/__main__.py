import sys

from cluster_doctor.cli.main import main

if __name__ == "__main__":  # Airflow's plugin manager imports every file under plugins/
    sys.exit(main())
