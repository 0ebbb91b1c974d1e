/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The Status section's state: running task with its live events, queue, recent results,
 * usage, and the Stop button.
 */
import { reactive } from 'vue'
import * as personalApi from '../api/personal.js'
import { createLiveProgress, MODE } from '../live/progress.js'

/** Most events kept for the running task; older ones scroll away. */
export const MAX_EVENTS = 200

/**
 * createStatusStore makes the store; `api` is the personal API module (tests may pass
 * another object with the same functions).
 *
 * @param {object} [api] getStatus, getTaskEvents, stopTasks, mintWsToken
 * @return {object} state and actions
 */
export function createStatusStore(api = personalApi) {
	const state = reactive({
		loaded: false,
		loading: false,
		error: null,
		running: null,
		queued: [],
		recent: [],
		usage: null,
		timezone: '',
		// How long finished requests are kept (days; 0: until deleted); null: not said.
		historyDays: null,
		events: [],
		liveMode: MODE.IDLE,
		stopping: false,
		stopResult: null,
		stopError: null,
	})
	let followed = null
	let lastSeq = 0
	let live = null
	let inFlight = null
	let reloadAgain = false

	function mergeEvents(taskId, events) {
		if (taskId !== followed) {
			return
		}
		let added = false
		for (const ev of events) {
			const seq = Number(ev.seq)
			if (!(seq > lastSeq) && state.events.some((e) => e.seq === seq)) {
				continue
			}
			state.events.push({ ...ev, seq })
			lastSeq = Math.max(lastSeq, seq)
			added = true
		}
		if (added) {
			state.events.sort((a, b) => a.seq - b.seq)
			if (state.events.length > MAX_EVENTS) {
				state.events.splice(0, state.events.length - MAX_EVENTS)
			}
		}
	}

	async function follow(taskId) {
		if (taskId === followed) {
			return
		}
		followed = taskId
		lastSeq = 0
		state.events = []
		live?.watch(taskId, 0)
		if (taskId === null) {
			return
		}
		try {
			const res = await api.getTaskEvents(taskId, 0)
			mergeEvents(taskId, res?.events || [])
			if (followed === taskId) {
				live?.watch(taskId, lastSeq)
			}
		} catch {
			// The live channel or the next reload fills the list in.
		}
	}

	async function doLoad() {
		state.loading = true
		try {
			const s = await api.getStatus()
			state.running = s.running || null
			state.queued = Array.isArray(s.queued) ? s.queued : []
			state.recent = Array.isArray(s.recent) ? s.recent : []
			state.usage = s.usage || null
			state.timezone = s.timezone || ''
			state.historyDays = Number.isInteger(s.history_days) ? s.history_days : null
			state.error = null
			state.loaded = true
			await follow(state.running ? state.running.id : null)
		} catch (err) {
			state.error = err
		} finally {
			state.loading = false
		}
	}

	/**
	 * load fetches the status; calls while one is under way coalesce into one more.
	 *
	 * @return {Promise<void>}
	 */
	async function load() {
		if (inFlight) {
			reloadAgain = true
			return inFlight
		}
		inFlight = (async () => {
			do {
				reloadAgain = false
				await doLoad()
			} while (reloadAgain)
		})()
		try {
			await inFlight
		} finally {
			inFlight = null
		}
	}

	/** stop cancels the running task and drops the queued ones (as `!stop`). */
	async function stop() {
		state.stopping = true
		state.stopError = null
		try {
			state.stopResult = await api.stopTasks()
		} catch (err) {
			state.stopError = err
		} finally {
			state.stopping = false
		}
		await load()
	}

	/**
	 * startLive opens the live channel (WebSocket, or polling when it cannot connect).
	 *
	 * @param {object} options wsPath and, for tests, WebSocketImpl, location, pollInterval, connectTimeout
	 */
	function startLive(options) {
		live?.close()
		live = createLiveProgress({
			mintToken: api.mintWsToken,
			fetchEvents: api.getTaskEvents,
			...options,
			onTask: () => { load() },
			onEvents: mergeEvents,
			onTaskFinished: () => { load() },
			onRefresh: () => { load() },
			onModeChange: (m) => { state.liveMode = m },
		})
		if (followed !== null) {
			live.watch(followed, lastSeq)
		}
		live.start()
	}

	/** close ends the live channel (page unload, tests). */
	function close() {
		live?.close()
		live = null
	}

	return { state, load, stop, startLive, close, mergeEvents }
}
