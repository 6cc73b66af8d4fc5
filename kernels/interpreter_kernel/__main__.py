"""``python -m interpreter_kernel -f {connection_file}``: start an interpreter kernel."""

from interpreter_kernel.app import main

if __name__ == "__main__":
    main()
