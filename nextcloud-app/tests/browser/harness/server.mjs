/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The browser-test harness: a small HTTP server that plays Nextcloud for the built pages.
 * It serves a page shaped like Nextcloud's settings page (the built js/*.mjs, the
 * initial-state hidden input, the globals @nextcloud/* read, data-theme light/dark),
 * implements the app's OCS routes by signing and forwarding to a real sidecar as the PHP
 * app does (docs/user-api.md), mints WebSocket tokens and proxies /istota-ws/ to the
 * sidecar's /v1/ws.
 */
import { readFile } from 'node:fs/promises'
import http from 'node:http'
import net from 'node:net'
import { join, normalize } from 'node:path'
import { mintWsToken, signedHeaders } from './signing.mjs'

const OCS_PREFIX = '/ocs/v2.php/apps/istota/api/v1/'
const WS_PATH = '/istota-ws/'
const THEME_CSS = new URL('./theme.css', import.meta.url)

function ocsBody(status, data) {
	const ok = status < 300
	return JSON.stringify({ ocs: { meta: { status: ok ? 'ok' : 'failure', statuscode: status, message: ok ? 'OK' : '' }, data } })
}

function escapeHtml(s) {
	return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c])
}

/**
 * startHarness starts the fake Nextcloud on 127.0.0.1.
 *
 * @param {object} o options
 * @param {string} o.repoRoot the repository (js/ is served from there)
 * @param {string} [o.appVersion] what the app reports as its version
 * @param {{uid: string, displayName: string, email: string, timezone: string, isAdmin: boolean, groups: string[]}} [o.user] the logged-in user
 * @return {Promise<object>} url, setSidecar(url, secret), requests, close()
 */
export async function startHarness({ repoRoot, appVersion = '0.1.0', user } = {}) {
	const me = { uid: 'alice', displayName: 'Alice', email: 'alice@example.org', timezone: 'Europe/Berlin', language: 'en', isAdmin: true, groups: ['staff'], ...user }
	let sidecar = { url: '', secret: '' }
	const log = []

	async function forward(method, path, body) {
		if (!sidecar.url) {
			return [503, { code: 'sidecar_unavailable', message: 'The Istota service is not configured yet. Run occ istota:setup.' }]
		}
		const raw = body === undefined ? '' : JSON.stringify(body)
		let res
		try {
			res = await fetch(sidecar.url + path, {
				method,
				headers: { ...signedHeaders(sidecar.secret, method, path, raw), ...(raw ? { 'Content-Type': 'application/json' } : {}) },
				body: raw || undefined,
				signal: AbortSignal.timeout(10000),
			})
		} catch {
			return [503, { code: 'sidecar_unavailable', message: 'The Istota service cannot be reached. Ask your administrator to check that it is running.' }]
		}
		const text = await res.text()
		let json
		try {
			json = text ? JSON.parse(text) : {}
		} catch {
			return [502, { code: 'sidecar_error', message: 'The Istota service sent an unreadable answer.' }]
		}
		if (res.ok) {
			return [res.status, json]
		}
		const err = json.error || {}
		if (res.status === 401) {
			// The app's signature was refused: a pairing problem, not the user's.
			return [502, { code: 'sidecar_rejected', message: 'The Istota service refused the app. Check the shared secret.' }]
		}
		const data = { code: err.code || 'sidecar_error', message: err.message || 'The Istota service answered with an error.' }
		if (err.fields) {
			data.fields = err.fields
		}
		if (err.current_etag) {
			data.current_etag = err.current_etag
		}
		return [res.status, data]
	}

	const userPath = (rest) => `/v1/users/${encodeURIComponent(me.uid)}/${rest}`
	const session = () => forward('POST', userPath('session'), {
		display_name: me.displayName, email: me.email, timezone: me.timezone, language: me.language, groups: me.groups, is_admin: me.isAdmin,
	})
	const query = (url, names) => {
		const q = new URLSearchParams()
		for (const n of names) {
			if (url.searchParams.has(n)) {
				q.set(n, url.searchParams.get(n))
			}
		}
		const s = q.toString()
		return s ? '?' + s : ''
	}

	// One entry per OCS route of docs/user-api.md: [method, pattern, admin only, handler].
	const routes = [
		['GET', /^me$/, false, () => session()],
		['GET', /^me\/status$/, false, async () => {
			const s = await session()
			return s[0] >= 300 ? s : forward('GET', userPath('status'))
		}],
		['GET', /^me\/tasks\/(\d+)\/events$/, false, (m, url) => forward('GET', userPath(`tasks/${m[1]}/events`) + query(url, ['after']))],
		['POST', /^me\/stop$/, false, () => forward('POST', userPath('stop'))],
		['POST', /^me\/ws-token$/, false, (m, url, body, req) => {
			if (!sidecar.secret) {
				return [503, { code: 'sidecar_unavailable', message: 'The Istota service is not configured yet.' }]
			}
			const { token, expires_in: ttl } = mintWsToken(sidecar.secret, me.uid, 60)
			return [200, { token, url: `ws://${req.headers.host}${WS_PATH}?token=${encodeURIComponent(token)}`, expires_in: ttl }]
		}],
		['GET', /^me\/memory\/user$/, false, () => forward('GET', userPath('memory/user'))],
		['PUT', /^me\/memory\/user$/, false, (m, url, body) => forward('PUT', userPath('memory/user'), { content: String(body?.content ?? ''), etag: String(body?.etag ?? '') })],
		['GET', /^me\/memory\/audit$/, false, (m, url) => forward('GET', userPath('memory/audit') + query(url, ['limit']))],
		['GET', /^me\/memory\/channels$/, false, () => forward('GET', userPath('memory/channels'))],
		['GET', /^me\/memory\/dated$/, false, (m, url) => forward('GET', userPath('memory/dated') + query(url, ['days']))],
		['GET', /^me\/memory\/facts$/, false, () => forward('GET', userPath('memory/facts'))],
		['GET', /^me\/memory\/search$/, false, (m, url) => forward('GET', userPath('memory/search') + query(url, ['q', 'limit']))],
		['POST', /^me\/memory\/facts\/(\d+)\/invalidate$/, false, (m) => forward('POST', userPath(`memory/facts/${m[1]}/invalidate`))],
		['DELETE', /^me\/memory\/facts\/(\d+)$/, false, (m) => forward('DELETE', userPath(`memory/facts/${m[1]}`))],
		['GET', /^me\/schedule$/, false, () => forward('GET', userPath('schedule'))],
		['POST', /^me\/schedule\/jobs\/([^/]+)\/(enable|disable|run)$/, false, (m) => forward('POST', userPath(`schedule/jobs/${encodeURIComponent(decodeURIComponent(m[1]))}/${m[2]}`))],
		['GET', /^me\/settings$/, false, () => forward('GET', userPath('settings'))],
		['PUT', /^me\/settings$/, false, (m, url, body) => forward('PUT', userPath('settings'), body ?? {})],
		['GET', /^me\/mailbox$/, false, () => forward('GET', userPath('mailbox'))],
		['PUT', /^me\/mailbox$/, false, (m, url, body) => forward('PUT', userPath('mailbox'), {
			host: String(body?.host ?? ''), port: Number(body?.port) || 0, tls: String(body?.tls ?? ''),
			username: String(body?.username ?? ''), password: String(body?.password ?? ''),
		})],
		['POST', /^me\/mailbox\/test$/, false, () => forward('POST', userPath('mailbox/test'))],
		['DELETE', /^me\/mailbox$/, false, () => forward('DELETE', userPath('mailbox'))],
		['GET', /^me\/approvals$/, false, () => forward('GET', userPath('approvals'))],
		['PUT', /^me\/approvals\/policies$/, false, (m, url, body) => forward('PUT', userPath('approvals/policies'), body ?? {})],
		['POST', /^me\/approvals\/(\d+)$/, false, (m, url, body) => forward('POST', userPath(`approvals/${m[1]}`), body ?? {})],
		['GET', /^admin\/health$/, true, async () => {
			const [status, data] = await forward('GET', '/v1/admin/health')
			if (status >= 300) {
				return [status, data]
			}
			const core = (v) => String(v).replace(/^v/, '').split(/[-+]/)[0]
			return [status, { ...data, app_version: appVersion, version_matches: core(data.version) === core(appVersion) }]
		}],
		['GET', /^admin\/settings$/, true, () => forward('GET', '/v1/admin/settings')],
		['PUT', /^admin\/settings$/, true, (m, url, body) => forward('PUT', '/v1/admin/settings', body ?? {})],
	]

	async function handleOcs(req, res, url, rawBody) {
		const route = url.pathname.slice(OCS_PREFIX.length)
		const send = (status, data) => {
			res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8' })
			res.end(ocsBody(status, data))
		}
		if (req.headers['ocs-apirequest'] !== 'true') {
			// Nextcloud refuses OCS calls without the header when they carry no CSRF proof.
			send(412, { code: 'csrf', message: 'CSRF check failed' })
			return
		}
		for (const [method, pattern, adminOnly, handler] of routes) {
			const m = route.match(pattern)
			if (!m || method !== req.method) {
				continue
			}
			if (adminOnly && !me.isAdmin) {
				send(403, { code: 'forbidden', message: 'Only administrators may do this.' })
				return
			}
			let body
			if (rawBody) {
				try {
					body = JSON.parse(rawBody)
				} catch {
					send(400, { code: 'invalid_request', message: 'The request body is not JSON.' })
					return
				}
			}
			const [status, data] = await handler(m, url, body, req)
			log.push({ method: req.method, route, status })
			send(status, data)
			return
		}
		send(404, { code: 'not_found', message: 'No such route.' })
	}

	function page(kind, theme) {
		const state = {
			botName: 'Istota',
			version: appVersion,
			filesUrl: '/apps/files/?dir=/istota',
			wsPath: WS_PATH,
			isAdmin: me.isAdmin,
		}
		const mount = kind === 'admin' ? 'istota-admin-settings' : 'istota-personal-settings'
		const themeAttr = theme === 'dark' ? 'data-theme-dark' : 'data-theme-light'
		return `<!DOCTYPE html>
<html lang="en" data-locale="en">
<head data-user="${escapeHtml(me.uid)}" data-user-displayname="${escapeHtml(me.displayName)}" data-requesttoken="harness-request-token">
<meta charset="utf-8">
<title>Istota - ${kind === 'admin' ? 'Administration' : 'Personal'} settings - Nextcloud</title>
<link rel="stylesheet" href="/harness/theme.css">
<script>
window._oc_webroot = ''
window._oc_appswebroots = { istota: '/apps/istota' }
window.OC = {
	webroot: '',
	config: { version: '31.0.0.0', modRewriteWorking: true },
	filePath: (app, type, file) => '/apps/' + app + '/' + (type ? type + '/' : '') + file,
	isUserAdmin: () => ${me.isAdmin ? 'true' : 'false'},
	getCurrentUser: () => ({ uid: ${JSON.stringify(me.uid)}, displayName: ${JSON.stringify(me.displayName)} }),
}
</script>
<script type="module" src="/apps/istota/js/${mount}.mjs"></script>
</head>
<body id="body-settings" data-themes="${theme}" ${themeAttr}>
<main id="content" class="app-settings">
<div id="app-content"><h2>Istota</h2><div id="${mount}"></div></div>
</main>
<input type="hidden" id="initial-state-istota-settings" value="${Buffer.from(JSON.stringify(state)).toString('base64')}">
</body>
</html>`
	}

	async function serveFile(res, path, type) {
		try {
			const data = await readFile(path)
			res.writeHead(200, { 'Content-Type': type, 'Cache-Control': 'no-store' })
			res.end(data)
		} catch {
			res.writeHead(404, { 'Content-Type': 'text/plain' })
			res.end('not found')
		}
	}

	const server = http.createServer((req, res) => {
		const chunks = []
		req.on('data', (c) => chunks.push(c))
		req.on('end', async () => {
			const url = new URL(req.url, 'http://harness')
			try {
				if (url.pathname.startsWith(OCS_PREFIX)) {
					await handleOcs(req, res, url, Buffer.concat(chunks).toString('utf8'))
				} else if (url.pathname === '/settings/user/istota' || url.pathname === '/settings/admin/istota') {
					res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' })
					res.end(page(url.pathname.includes('/admin/') ? 'admin' : 'personal', url.searchParams.get('theme') === 'dark' ? 'dark' : 'light'))
				} else if (url.pathname === '/harness/theme.css') {
					await serveFile(res, THEME_CSS, 'text/css')
				} else if (url.pathname.startsWith('/apps/istota/js/')) {
					const name = normalize(url.pathname.slice('/apps/istota/js/'.length))
					if (name.includes('..') || name.includes('/')) {
						res.writeHead(404)
						res.end()
						return
					}
					await serveFile(res, join(repoRoot, 'js', name), 'text/javascript')
				} else {
					res.writeHead(404, { 'Content-Type': 'text/plain' })
					res.end('not found')
				}
			} catch (err) {
				res.writeHead(500, { 'Content-Type': 'text/plain' })
				res.end('harness error: ' + err.message)
			}
		})
	})

	// The reverse-proxy path: /istota-ws/?token=… → sidecar /v1/ws?token=…, bytes piped.
	server.on('upgrade', (req, socket, head) => {
		const url = new URL(req.url, 'http://harness')
		if (!url.pathname.startsWith(WS_PATH) || !sidecar.url) {
			socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n')
			return
		}
		const target = new URL(sidecar.url)
		const upstream = net.connect(Number(target.port), target.hostname, () => {
			const lines = [`GET /v1/ws${url.search} HTTP/1.1`]
			for (let i = 0; i < req.rawHeaders.length; i += 2) {
				const name = req.rawHeaders[i]
				lines.push(`${name}: ${name.toLowerCase() === 'host' ? target.host : req.rawHeaders[i + 1]}`)
			}
			upstream.write(lines.join('\r\n') + '\r\n\r\n')
			if (head?.length) {
				upstream.write(head)
			}
			upstream.pipe(socket)
			socket.pipe(upstream)
		})
		const drop = () => { socket.destroy(); upstream.destroy() }
		upstream.on('error', () => socket.end('HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n'))
		socket.on('error', drop)
		socket.on('close', () => upstream.destroy())
		upstream.on('close', () => socket.destroy())
	})

	await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
	const url = `http://127.0.0.1:${server.address().port}`
	return {
		url,
		user: me,
		log,
		/**
		 * setSidecar points the "app" at a sidecar (or at nothing: url "").
		 *
		 * @param {string} sidecarUrl base URL
		 * @param {string} secret shared secret
		 */
		setSidecar(sidecarUrl, secret) {
			sidecar = { url: sidecarUrl, secret }
		},
		/** signed POST to the sidecar as the app would, for seeding. */
		sidecarPost: (path, body) => forward('POST', path, body),
		close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
	}
}
