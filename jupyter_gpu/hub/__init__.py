"""jupyter-gpu as a JupyterHub service: the admin's GPU console and one NVML sampler per host.

Run by the hub (``c.JupyterHub.services``, command ``python -m jupyter_gpu.hub``); see
``docs/jupyterhub.md`` for the copy-paste ``jupyterhub_config.py``. :mod:`.core` is pure (the
console's data and its privacy rule); :mod:`.app` is the tornado app with the hub's OAuth.
"""
