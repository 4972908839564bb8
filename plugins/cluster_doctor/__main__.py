import sys

from cluster_doctor.cli import main

sys.exit(main())
