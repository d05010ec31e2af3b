"""The explorer: a local web page over the one engine (``servesize serve``).

- ``form``      what the page's form is made of: the Scenario's declaration, the two load fields only
                the page has (declared the same way), the layout and the presets;
- ``requests``  request JSON -> Scenario / FitQuery, refused with the field it names (HTTP 400);
- ``views``     the JSON documents the page renders, each built from library calls only;
- ``charts``    the chart series (every point computed in Python) and the heavier panels;
- ``server``    what the server needs before the engine loads: worker pools, JSON in and out, the body limit;
- ``handlers``  the API handlers (imported on the first API request);
- ``app``       the aiohttp application: the static assets (``static/``) and the routes.

No formula, bound, default or catalogue constant lives in the page's JavaScript: it draws what
these modules send.
"""
