/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * A real HTTP server on 127.0.0.1 that answers the app's OCS routes from a table and
 * records every request, with jsdom's location pointed at it so that the code under test
 * builds its URLs for it and goes through jsdom's real XHR (real headers and bodies).
 * jsdom keeps the document's first origin after reconfigure, so the server answers CORS
 * (preflights are answered and not recorded).
 */
import http from 'node:http'

/**
 * ocs wraps data in Nextcloud's OCS v2 envelope.
 *
 * @param {number} status HTTP status
 * @param {any} data the payload
 * @return {string}
 */
export function ocs(status, data) {
	const ok = status < 300
	return JSON.stringify({ ocs: { meta: { status: ok ? 'ok' : 'failure', statuscode: status, message: ok ? 'OK' : '' }, data } })
}

/**
 * startOcsServer serves `routes`: keys "METHOD /path" below /ocs/v2.php/apps/istota/api/v1/,
 * values (req) => [status, data] or [status, rawBody, contentType].
 *
 * @param {Object<string, Function>} routes the answers
 * @return {Promise<{url: string, requests: Array<object>, routes: object, close: Function}>}
 */
export async function startOcsServer(routes = {}) {
	const requests = []
	const table = { ...routes }
	const server = http.createServer((req, res) => {
		if (req.headers.origin) {
			res.setHeader('Access-Control-Allow-Origin', req.headers.origin)
			res.setHeader('Access-Control-Allow-Credentials', 'true')
		}
		if (req.method === 'OPTIONS') {
			res.setHeader('Access-Control-Allow-Methods', 'GET, POST, PUT, DELETE')
			res.setHeader('Access-Control-Allow-Headers', req.headers['access-control-request-headers'] || '')
			res.writeHead(204)
			res.end()
			return
		}
		let body = ''
		req.on('data', (c) => { body += c })
		req.on('end', () => {
			const url = new URL(req.url, 'http://x')
			const prefix = '/ocs/v2.php/apps/istota/api/v1/'
			const route = url.pathname.startsWith(prefix) ? url.pathname.slice(prefix.length) : url.pathname
			const rec = { method: req.method, path: url.pathname, route, query: Object.fromEntries(url.searchParams), headers: req.headers, body: body ? JSON.parse(body) : undefined }
			requests.push(rec)
			const handler = table[`${req.method} ${route}`]
			if (!handler) {
				res.writeHead(404, { 'Content-Type': 'application/json' })
				res.end(ocs(404, { code: 'not_found', message: 'no such route in the test' }))
				return
			}
			const [status, data, contentType] = handler(rec)
			if (contentType) {
				res.writeHead(status, { 'Content-Type': contentType })
				res.end(data)
				return
			}
			res.writeHead(status, { 'Content-Type': 'application/json' })
			res.end(ocs(status, data))
		})
	})
	await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
	const { port } = server.address()
	const url = `http://127.0.0.1:${port}`
	// eslint-disable-next-line no-undef
	jsdom.reconfigure({ url: url + '/settings/user/istota' })
	return {
		url,
		port,
		requests,
		routes: table,
		close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve) }),
	}
}

/**
 * freePort is a port nobody listens on (bound, then released).
 *
 * @return {Promise<number>}
 */
export async function freePort() {
	const s = http.createServer()
	await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
	const { port } = s.address()
	await new Promise((resolve) => s.close(resolve))
	return port
}

/**
 * waitFor polls cond until it holds; the timeout is generous and only for waiting.
 *
 * @param {Function} cond the condition
 * @param {string} what for the failure message
 * @param {number} timeout ms
 */
export async function waitFor(cond, what, timeout = 10000) {
	const end = Date.now() + timeout
	while (Date.now() < end) {
		if (await cond()) {
			return
		}
		await new Promise((resolve) => setTimeout(resolve, 20))
	}
	throw new Error(`timed out waiting for ${what}`)
}
