"""The explorer: a local web page over the one engine (``servesize serve``).

- ``form``      what the page's form is made of: the Scenario's declaration, the few load and cost
                fields only the page has (declared the same way), the layout and the presets;
- ``requests``  request JSON -> Scenario / FitQuery, refused with the field it names (HTTP 400);
- ``views``     the JSON documents the page renders, each built from library calls only;
- ``charts``    the chart series (every point computed in Python) and the heavier panels;
- ``app``       the aiohttp application: the JSON API and the static assets (``static/``).

No formula, bound, default or catalogue constant lives in the page's JavaScript: it draws what
these modules send.
"""
