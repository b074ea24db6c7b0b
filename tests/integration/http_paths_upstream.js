// sluice integration tests: an Express server for test_http_paths.c.
//
// Routes as an Express application usually does: a router mounted at /api
// (app.use: "/api" and everything under "/api/", letters in either case,
// on the path as sent) answers 200 "api"; anything else is 404 "other".
// Usage: node http_paths_upstream.js PORT (express from NODE_PATH).
'use strict';
const express = require('express');

const app = express();
const api = express.Router();
api.all(/.*/, (req, res) => res.type('text/plain').send('api\n'));
app.use('/api', api);
app.use((req, res) => res.status(404).type('text/plain').send('other\n'));
// An error inside Express (a path it cannot decode) is not a route.
app.use((err, req, res, next) => res.status(400).type('text/plain').send('error\n'));

const port = Number(process.argv[2]);
app.listen(port, '127.0.0.1', () => process.stdout.write(`listening on ${port}\n`));
