"""``python -m nemo_train ...`` is the ``nemo-train`` console script."""

from nemo_train.cli import main

if __name__ == "__main__":
    main()
