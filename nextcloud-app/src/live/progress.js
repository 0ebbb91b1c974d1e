/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Live progress of the user's running task. The sidecar pushes task changes and tool
 * actions over a WebSocket reached through the reverse-proxy path (wsPath) with a
 * short-lived token the app mints. When that socket cannot be opened (path not proxied,
 * sidecar down, token refused) we poll the task's events through the app every 2 s.
 */

/** Modes, in the order a healthy page goes through them. */
export const MODE = Object.freeze({
	IDLE: 'idle',
	CONNECTING: 'connecting',
	WEBSOCKET: 'websocket',
	POLLING: 'polling',
	CLOSED: 'closed',
})

/**
 * wsUrl is the WebSocket URL for a minted token: the app's `url` when it gave one, else
 * the page's wsPath on the page's own host, with `token` added unless already there.
 *
 * @param {{token: string, url?: string}} minted POST me/ws-token's answer
 * @param {string} wsPath the initial state's wsPath, e.g. "/istota-ws/"
 * @param {{protocol: string, host: string}} location the page's location
 * @return {string} the URL, or "" when there is nowhere to connect
 */
export function wsUrl(minted, wsPath, location) {
	let base = (minted && minted.url) || wsPath || ''
	if (!base || !minted || !minted.token) {
		return ''
	}
	if (/^https?:\/\//i.test(base)) {
		base = base.replace(/^http/i, 'ws')
	} else if (!/^wss?:\/\//i.test(base)) {
		const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://'
		base = scheme + location.host + (base.startsWith('/') ? '' : '/') + base
	}
	const url = new URL(base)
	if (!url.searchParams.has('token')) {
		url.searchParams.set('token', minted.token)
	}
	return url.toString()
}

/**
 * createLiveProgress follows one task at a time (watch) and reports what happens.
 *
 * @param {object} o options
 * @param {() => Promise<{token: string, url?: string}>} o.mintToken POST me/ws-token
 * @param {(taskId: number, after: number) => Promise<{events: Array<object>, status: string}>} o.fetchEvents GET me/tasks/{id}/events
 * @param {string} o.wsPath reverse-proxy path of the sidecar's WebSocket; "" = poll only
 * @param {Function} [o.WebSocketImpl] the WebSocket constructor (the browser's by default)
 * @param {{protocol: string, host: string}} [o.location] the page's location
 * @param {number} [o.pollInterval] ms between polls in the fallback
 * @param {number} [o.connectTimeout] ms an opening socket may take before we poll instead
 * @param {number} [o.refreshEvery] in the fallback, call onRefresh every this many polls
 * @param {number} [o.maxReconnects] reconnects of a socket that was open before we poll
 * @param {(task: object) => void} [o.onTask] a task of the user changed state
 * @param {(taskId: number, events: Array<object>) => void} [o.onEvents] new events of a task
 * @param {(taskId: number, status: string) => void} [o.onTaskFinished] polling saw the task end
 * @param {() => void} [o.onRefresh] the fallback's periodic nudge to reload the status
 * @param {(mode: string) => void} [o.onModeChange] the mode changed
 * @return {{start: Function, watch: Function, close: Function, mode: Function}}
 */
export function createLiveProgress(o) {
	const opts = {
		WebSocketImpl: globalThis.WebSocket,
		location: globalThis.location,
		pollInterval: 2000,
		connectTimeout: 5000,
		refreshEvery: 5,
		maxReconnects: 3,
		onTask: () => {},
		onEvents: () => {},
		onTaskFinished: () => {},
		onRefresh: () => {},
		onModeChange: () => {},
		...o,
	}
	let mode = MODE.IDLE
	let socket = null
	let connectTimer = null
	let pollTimer = null
	let reconnectTimer = null
	let reconnects = 0
	let polls = 0
	let watched = null // {id, after}

	function setMode(m) {
		if (mode !== m) {
			mode = m
			opts.onModeChange(m)
		}
	}

	function clearTimers() {
		clearTimeout(connectTimer)
		clearTimeout(pollTimer)
		clearTimeout(reconnectTimer)
		connectTimer = pollTimer = reconnectTimer = null
	}

	function dropSocket() {
		if (socket) {
			const s = socket
			socket = null
			s.onopen = s.onmessage = s.onclose = s.onerror = null
			try {
				s.close()
			} catch {
				// Closing a socket that never opened may throw in some engines; it is gone either way.
			}
		}
	}

	function fallBackToPolling() {
		if (mode === MODE.CLOSED) {
			return
		}
		dropSocket()
		clearTimers()
		setMode(MODE.POLLING)
		polls = 0
		schedulePoll(0)
	}

	function schedulePoll(delay) {
		clearTimeout(pollTimer)
		pollTimer = setTimeout(poll, delay)
	}

	async function poll() {
		if (mode !== MODE.POLLING) {
			return
		}
		polls++
		const current = watched
		if (current) {
			try {
				const res = await opts.fetchEvents(current.id, current.after)
				if (mode !== MODE.POLLING || watched !== current) {
					return
				}
				const events = Array.isArray(res?.events) ? res.events : []
				for (const ev of events) {
					if (Number(ev.seq) > current.after) {
						current.after = Number(ev.seq)
					}
				}
				if (events.length) {
					opts.onEvents(current.id, events)
				}
				if (res?.status && res.status !== 'running') {
					watched = null
					opts.onTaskFinished(current.id, res.status)
				}
			} catch {
				// The next poll tries again; the status reload shows a lasting outage.
			}
		}
		if (polls % opts.refreshEvery === 0 && mode === MODE.POLLING) {
			opts.onRefresh()
		}
		if (mode === MODE.POLLING) {
			schedulePoll(opts.pollInterval)
		}
	}

	function onFrame(raw) {
		let frame
		try {
			frame = JSON.parse(typeof raw === 'string' ? raw : String(raw))
		} catch {
			return
		}
		if (frame?.type === 'task' && frame.task) {
			opts.onTask(frame.task)
		} else if (frame?.type === 'event' && frame.task_id !== undefined) {
			const ev = { seq: frame.seq, at: frame.at, kind: frame.kind, text: frame.text }
			if (watched && watched.id === frame.task_id && Number(ev.seq) > watched.after) {
				watched.after = Number(ev.seq)
			}
			opts.onEvents(frame.task_id, [ev])
		}
	}

	async function connect() {
		if (mode === MODE.CLOSED) {
			return
		}
		if (!opts.wsPath || typeof opts.WebSocketImpl !== 'function') {
			fallBackToPolling()
			return
		}
		setMode(MODE.CONNECTING)
		let url = ''
		try {
			url = wsUrl(await opts.mintToken(), opts.wsPath, opts.location)
		} catch {
			url = ''
		}
		if (mode !== MODE.CONNECTING) {
			return
		}
		if (!url) {
			fallBackToPolling()
			return
		}
		let opened = false
		let s
		try {
			s = new opts.WebSocketImpl(url)
		} catch {
			fallBackToPolling()
			return
		}
		socket = s
		connectTimer = setTimeout(() => {
			if (!opened && socket === s) {
				fallBackToPolling()
			}
		}, opts.connectTimeout)
		s.onopen = () => {
			opened = true
			reconnects = 0
			clearTimeout(connectTimer)
			setMode(MODE.WEBSOCKET)
		}
		s.onmessage = (msg) => onFrame(msg.data)
		s.onerror = () => {
			// onclose follows and decides.
		}
		s.onclose = () => {
			if (socket !== s) {
				return
			}
			socket = null
			clearTimeout(connectTimer)
			if (!opened || reconnects >= opts.maxReconnects) {
				fallBackToPolling()
				return
			}
			// It worked before (sidecar restart, proxy timeout): a new token, a new socket.
			reconnects++
			setMode(MODE.CONNECTING)
			reconnectTimer = setTimeout(connect, 1000 * reconnects)
			// Events missed meanwhile come from the status reload.
			opts.onRefresh()
		}
	}

	return {
		/** start opens the socket, or polls when it cannot. */
		start() {
			if (mode === MODE.IDLE) {
				connect()
			}
		},
		/**
		 * watch follows one task's events from `after` on; null follows none.
		 *
		 * @param {number|null} taskId the running task
		 * @param {number} after last sequence number already shown
		 */
		watch(taskId, after = 0) {
			watched = (taskId === null || taskId === undefined) ? null : { id: taskId, after: Number(after) || 0 }
			if (mode === MODE.POLLING && watched) {
				schedulePoll(0)
			}
		},
		/** close stops the socket and every timer; the object is done afterwards. */
		close() {
			setMode(MODE.CLOSED)
			clearTimers()
			dropSocket()
		},
		/** @return {string} the current mode */
		mode: () => mode,
	}
}
