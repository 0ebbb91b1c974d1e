/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The Scheduled jobs section's state: CRON.md jobs, heartbeat checks, briefings and the
 * problems found in their files.
 */
import { reactive } from 'vue'
import * as personalApi from '../api/personal.js'

/**
 * createScheduleStore makes the store.
 *
 * @param {object} [api] the personal API module
 * @return {object} state and actions
 */
export function createScheduleStore(api = personalApi) {
	const state = reactive({
		loaded: false,
		error: null,
		jobs: [],
		cronFile: { problems: [], kept_last_good: false, checked_at: '' },
		checks: [],
		heartbeatFile: { problems: [] },
		briefings: [],
		briefingsFile: { problems: [] },
		busy: {},
		actionError: null,
		lastAction: null,
	})

	async function load() {
		try {
			const s = await api.getSchedule()
			state.jobs = s.jobs || []
			state.cronFile = { problems: [], kept_last_good: false, checked_at: '', ...(s.cron_file || {}) }
			state.checks = s.checks || []
			state.heartbeatFile = { problems: [], ...(s.heartbeat_file || {}) }
			state.briefings = s.briefings || []
			state.briefingsFile = { problems: [], ...(s.briefings_file || {}) }
			state.error = null
			state.loaded = true
		} catch (err) {
			state.error = err
		}
	}

	/**
	 * act enables, disables or runs one job and puts the answer in its place.
	 *
	 * @param {string} name the job
	 * @param {'enable'|'disable'|'run'} action what to do
	 */
	async function act(name, action) {
		state.busy[name] = action
		state.actionError = null
		try {
			const job = await api.jobAction(name, action)
			const i = state.jobs.findIndex((j) => j.name === name)
			if (job && typeof job === 'object' && i >= 0) {
				state.jobs[i] = { ...state.jobs[i], ...job }
			}
			state.lastAction = { name, action }
		} catch (err) {
			state.actionError = { name, action, error: err }
			if (err.code === 'not_found') {
				await load()
			}
		} finally {
			delete state.busy[name]
		}
	}

	return { state, load, act }
}
