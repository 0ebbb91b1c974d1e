/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The personal Settings section: persona, timezone, e-mail addresses, calendars.
 */
import { reactive } from 'vue'
import * as personalApi from '../api/personal.js'

/** Most addresses a user may list (the sidecar refuses more). */
export const MAX_EMAILS = 10

/**
 * createSettingsStore makes the store. The form edits `form`; `saved` is what the
 * sidecar holds, so only changed keys are sent.
 *
 * @param {object} [api] the personal API module
 * @return {object} state and actions
 */
export function createSettingsStore(api = personalApi) {
	const state = reactive({
		loaded: false,
		error: null,
		saving: false,
		savedOk: false,
		fieldErrors: {},
		saved: null,
		form: { persona: '', timezone: '', emails: [], calendars: [] },
		available: [],
		filesPath: '',
	})

	function apply(s) {
		state.saved = {
			persona: s.persona || '',
			timezone: s.timezone || '',
			emails: [...(s.emails || [])],
			calendars: [...(s.calendars?.enabled || [])],
		}
		state.form = { ...state.saved, emails: [...state.saved.emails], calendars: [...state.saved.calendars] }
		state.available = s.calendars?.available || []
		state.filesPath = s.files_path || ''
	}

	async function load() {
		try {
			apply(await api.getSettings())
			state.error = null
			state.loaded = true
		} catch (err) {
			state.error = err
		}
	}

	/**
	 * patch is what changed between the form and the stored settings; empty e-mail
	 * rows are dropped, addresses trimmed.
	 *
	 * @return {object}
	 */
	function patch() {
		const out = {}
		const f = state.form
		const s = state.saved || { persona: '', timezone: '', emails: [], calendars: [] }
		if (f.persona !== s.persona) {
			out.persona = f.persona
		}
		if (f.timezone !== s.timezone) {
			out.timezone = f.timezone
		}
		const emails = f.emails.map((e) => e.trim()).filter((e) => e !== '')
		if (JSON.stringify(emails) !== JSON.stringify(s.emails)) {
			out.emails = emails
		}
		if (JSON.stringify([...f.calendars].sort()) !== JSON.stringify([...s.calendars].sort())) {
			out.calendars = [...f.calendars]
		}
		return out
	}

	async function save() {
		const p = patch()
		state.fieldErrors = {}
		state.savedOk = false
		state.error = null
		if (Object.keys(p).length === 0) {
			state.savedOk = true
			return
		}
		state.saving = true
		try {
			apply(await api.putSettings(p))
			state.savedOk = true
		} catch (err) {
			if (err.code === 'invalid_settings') {
				state.fieldErrors = { ...err.fields }
			}
			state.error = err
		} finally {
			state.saving = false
		}
	}

	return { state, load, save, patch }
}
