/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Live progress: a real WebSocket server (ws) and real HTTP on loopback; jsdom's own
 * WebSocket client. When the socket cannot be opened the store polls the events route.
 */
import net from 'node:net'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { WebSocketServer } from 'ws'
import { MODE, wsUrl } from '../../src/live/progress.js'
import { createStatusStore } from '../../src/stores/status.js'
import { freePort, startOcsServer, waitFor } from './helpers/ocsServer.js'

describe('wsUrl', () => {
	const loc = { protocol: 'https:', host: 'cloud.example.org' }
	const cases = [
		{ name: 'page path on the page host, wss on https', minted: { token: 'T' }, wsPath: '/istota-ws/', want: 'wss://cloud.example.org/istota-ws/?token=T' },
		{ name: 'relative path without a slash', minted: { token: 'T' }, wsPath: 'istota-ws/', want: 'wss://cloud.example.org/istota-ws/?token=T' },
		{ name: 'the app\'s absolute https url', minted: { token: 'T', url: 'https://other.example.org/istota-ws/' }, wsPath: '/x/', want: 'wss://other.example.org/istota-ws/?token=T' },
		{ name: 'an url that already has the token', minted: { token: 'T', url: 'wss://h/istota-ws/?token=T' }, wsPath: '', want: 'wss://h/istota-ws/?token=T' },
		{ name: 'token characters are encoded', minted: { token: 'a+b/c=' }, wsPath: '/w', want: 'wss://cloud.example.org/w?token=a%2Bb%2Fc%3D' },
		{ name: 'nowhere to connect', minted: { token: 'T' }, wsPath: '', want: '' },
		{ name: 'no token', minted: { token: '' }, wsPath: '/w', want: '' },
	]
	for (const c of cases) {
		it(c.name, () => {
			expect(wsUrl(c.minted, c.wsPath, loc)).toBe(c.want)
		})
	}
	it('ws on http pages', () => {
		expect(wsUrl({ token: 'T' }, '/w', { protocol: 'http:', host: '127.0.0.1:8080' })).toBe('ws://127.0.0.1:8080/w?token=T')
	})
})

const task = (id, over = {}) => ({ id, source: 'talk', status: 'running', prompt: `task ${id}`, started_at: '2026-11-22T08:00:00Z', ...over })

describe('status store with live progress', () => {
	let srv
	let wss
	let store
	let status
	let events
	beforeEach(async () => {
		srv = await startOcsServer()
		status = { running: task(7), queued: [task(8, { status: 'pending' })], recent: [], usage: { today: { input_tokens: 1, output_tokens: 2, cost_usd: 0.01, tasks: 1 } }, timezone: 'Europe/Berlin' }
		events = [{ seq: 1, at: '2026-11-22T08:00:01Z', kind: 'progress', text: 'reading files' }]
		srv.routes['GET me/status'] = () => [200, status]
		srv.routes['GET me/tasks/7/events'] = (req) => [200, { events: events.filter((e) => e.seq > Number(req.query.after)), status: status.running ? 'running' : 'completed' }]
	})
	afterEach(async () => {
		store?.close()
		store = null
		await srv.close()
		if (wss) {
			for (const c of wss.clients) {
				c.terminate()
			}
			await new Promise((resolve) => wss.close(resolve))
			wss = null
		}
	})

	it('follows the running task over the WebSocket', async () => {
		wss = new WebSocketServer({ host: '127.0.0.1', port: 0 })
		await new Promise((resolve) => wss.on('listening', resolve))
		const wsPort = wss.address().port
		const connections = []
		wss.on('connection', (sock, req) => { connections.push({ sock, url: req.url }) })
		let minted = 0
		srv.routes['POST me/ws-token'] = () => [200, { token: `tok-${++minted}`, url: `ws://127.0.0.1:${wsPort}/istota-ws/`, expires_in: 60 }]

		store = createStatusStore()
		await store.load()
		expect(store.state.running.id).toBe(7)
		expect(store.state.events.map((e) => e.seq)).toEqual([1])
		store.startLive({ wsPath: '/istota-ws/' })
		await waitFor(() => store.state.liveMode === MODE.WEBSOCKET, 'the socket to open')
		expect(connections[0].url).toBe('/istota-ws/?token=tok-1')

		const sock = connections[0].sock
		sock.send(JSON.stringify({ type: 'event', task_id: 7, seq: 2, at: '2026-11-22T08:00:02Z', kind: 'tool', text: 'Read USER.md' }))
		sock.send(JSON.stringify({ type: 'event', task_id: 99, seq: 3, at: '2026-11-22T08:00:02Z', kind: 'tool', text: 'another task' }))
		sock.send(JSON.stringify({ type: 'event', task_id: 7, seq: 2, at: '2026-11-22T08:00:02Z', kind: 'tool', text: 'Read USER.md' }))
		sock.send('not json')
		await waitFor(() => store.state.events.length === 2, 'the pushed event')
		expect(store.state.events.map((e) => e.text)).toEqual(['reading files', 'Read USER.md'])

		// The task ends: the sidecar sends its new state, the store reloads the status.
		status = { ...status, running: null, queued: [], recent: [task(7, { status: 'completed', result: 'done' })] }
		sock.send(JSON.stringify({ type: 'task', task: task(7, { status: 'completed' }) }))
		await waitFor(() => store.state.running === null, 'the reload after the task frame')
		expect(store.state.recent[0].status).toBe('completed')
		expect(store.state.events).toEqual([])
		expect(srv.requests.filter((r) => r.route.startsWith('me/tasks/7/events'))).toHaveLength(1)
	})

	it('reconnects with a fresh token when an open socket drops', async () => {
		wss = new WebSocketServer({ host: '127.0.0.1', port: 0 })
		await new Promise((resolve) => wss.on('listening', resolve))
		const wsPort = wss.address().port
		const urls = []
		wss.on('connection', (sock, req) => { urls.push(req.url) })
		let minted = 0
		srv.routes['POST me/ws-token'] = () => [200, { token: `tok-${++minted}`, url: `ws://127.0.0.1:${wsPort}/istota-ws/`, expires_in: 60 }]
		store = createStatusStore()
		await store.load()
		store.startLive({ wsPath: '/istota-ws/' })
		await waitFor(() => urls.length === 1 && store.state.liveMode === MODE.WEBSOCKET, 'the first socket')
		for (const c of wss.clients) {
			c.terminate()
		}
		await waitFor(() => urls.length === 2, 'the second socket')
		expect(urls).toEqual(['/istota-ws/?token=tok-1', '/istota-ws/?token=tok-2'])
		await waitFor(() => store.state.liveMode === MODE.WEBSOCKET, 'the socket to be open again')
	})

	const fallbacks = [
		{
			name: 'nothing listens at the WebSocket path',
			setup: async () => {
				const port = await freePort()
				srv.routes['POST me/ws-token'] = () => [200, { token: 't', url: `ws://127.0.0.1:${port}/istota-ws/`, expires_in: 60 }]
				return { wsPath: '/istota-ws/' }
			},
		},
		{
			name: 'the upgrade never completes (path not proxied, request hangs)',
			setup: async () => {
				const hang = net.createServer(() => {})
				await new Promise((resolve) => hang.listen(0, '127.0.0.1', resolve))
				srv.routes['POST me/ws-token'] = () => [200, { token: 't', url: `ws://127.0.0.1:${hang.address().port}/istota-ws/`, expires_in: 60 }]
				return { wsPath: '/istota-ws/', connectTimeout: 200, cleanup: () => { hang.close() } }
			},
		},
		{
			name: 'the app cannot mint a token (sidecar down)',
			setup: async () => {
				srv.routes['POST me/ws-token'] = () => [503, { code: 'sidecar_unavailable', message: 'down' }]
				return { wsPath: '/istota-ws/' }
			},
		},
		{
			name: 'no WebSocket path configured',
			setup: async () => ({ wsPath: '' }),
		},
	]
	for (const c of fallbacks) {
		it(`polls the events route when ${c.name}`, async () => {
			const { cleanup, ...options } = await c.setup()
			store = createStatusStore()
			await store.load()
			store.startLive({ ...options, pollInterval: 50 })
			await waitFor(() => store.state.liveMode === MODE.POLLING, 'the fallback to polling')
			events.push({ seq: 2, at: '2026-11-22T08:00:03Z', kind: 'tool', text: 'Write notes.md' })
			await waitFor(() => store.state.events.length === 2, 'the polled event')
			const polls = srv.requests.filter((r) => r.route === 'me/tasks/7/events')
			expect(polls.some((r) => r.query.after === '1')).toBe(true)
			expect(polls.every((r) => Number(r.query.after) <= 2)).toBe(true)

			// The task ends: the next poll says so and the status is reloaded.
			status = { ...status, running: null, queued: [], recent: [task(7, { status: 'completed' })] }
			await waitFor(() => store.state.running === null, 'the reload after the task ended')
			cleanup?.()
		})
	}

	it('Stop asks the app and reloads', async () => {
		srv.routes['POST me/stop'] = () => { status = { ...status, running: null, queued: [] }; return [200, { stopped: 1, dropped: 1 }] }
		store = createStatusStore()
		await store.load()
		await store.stop()
		expect(store.state.stopResult).toEqual({ stopped: 1, dropped: 1 })
		expect(store.state.running).toBeNull()
		expect(store.state.queued).toEqual([])
	})

	it('a sidecar that is down is an error in the state, not a throw', async () => {
		srv.routes['GET me/status'] = () => [503, { code: 'sidecar_unavailable', message: 'The Istota service cannot be reached.' }]
		store = createStatusStore()
		await store.load()
		expect(store.state.error.code).toBe('sidecar_unavailable')
		expect(store.state.loaded).toBe(false)
	})
})
