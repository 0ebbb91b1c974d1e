/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The one place that talks to the app's OCS API: builds the URL, unwraps the OCS envelope
 * and turns every failure into an ApiError whose message is safe to show.
 */
import axios from '@nextcloud/axios'
import { t } from '@nextcloud/l10n'
import { generateOcsUrl } from '@nextcloud/router'

/** Base of every route of the app's OCS API. */
export const API_BASE = '/apps/istota/api/v1/'

/**
 * ApiError is what every API wrapper rejects with. `code` is the stable code of the
 * contract (docs/user-api.md), `sidecar_unavailable` when the sidecar is down and
 * `network` when Nextcloud itself could not be reached.
 */
export class ApiError extends Error {
	/**
	 * @param {object} o the error's parts
	 * @param {number} o.status HTTP status, 0 when there was no answer
	 * @param {string} o.code stable error code
	 * @param {string} o.message message for people
	 * @param {Object<string, string>} [o.fields] field-level problems (422)
	 * @param {string} [o.currentEtag] the file's ETag now (409 on USER.md)
	 */
	constructor({ status, code, message, fields = {}, currentEtag = '' }) {
		super(message)
		this.name = 'ApiError'
		this.status = status
		this.code = code
		this.fields = fields
		this.currentEtag = currentEtag
	}
}

/**
 * ocsUrl is the absolute URL of one route of the app's OCS API.
 *
 * @param {string} path route below api/v1, e.g. "me/status"
 * @return {string}
 */
export function ocsUrl(path) {
	return generateOcsUrl(API_BASE + path)
}

/**
 * seg encodes one path segment (a job name may hold spaces or slashes).
 *
 * @param {string|number} value the segment
 * @return {string}
 */
export function seg(value) {
	return encodeURIComponent(String(value))
}

const fallbackMessages = {
	sidecar_unavailable: () => t('istota', 'The Istota service cannot be reached right now. Nothing is lost; try again in a moment.'),
	unavailable: () => t('istota', 'Nextcloud files cannot be reached by Istota right now. Try again in a moment.'),
	not_allowed: () => t('istota', 'You are not allowed to use Istota. Ask your administrator.'),
	not_found: () => t('istota', 'It no longer exists.'),
	conflict: () => t('istota', 'It was changed elsewhere in the meantime.'),
	invalid_settings: () => t('istota', 'Some values are not valid.'),
	network: () => t('istota', 'Nextcloud cannot be reached. Check your connection.'),
}

/**
 * toApiError maps an axios failure (or anything thrown) to an ApiError.
 *
 * @param {any} err what axios threw
 * @return {ApiError}
 */
export function toApiError(err) {
	if (err instanceof ApiError) {
		return err
	}
	const response = err?.response
	if (!response) {
		return new ApiError({ status: 0, code: 'network', message: fallbackMessages.network() })
	}
	const status = response.status
	const body = response.data
	const data = (body && typeof body === 'object' && body.ocs) ? body.ocs.data : body
	let code = (data && typeof data === 'object' && typeof data.code === 'string') ? data.code : ''
	if (!code) {
		// An answer without our envelope: Nextcloud itself (login expired, app disabled,
		// proxy error page). 502–504 mean nobody behind Nextcloud answered.
		if (status === 401) {
			code = 'not_logged_in'
		} else if (status === 403) {
			code = 'not_allowed'
		} else if (status === 404) {
			code = 'not_found'
		} else if (status >= 502 && status <= 504) {
			code = 'sidecar_unavailable'
		} else {
			code = 'server_error'
		}
	}
	let message = (data && typeof data === 'object' && typeof data.message === 'string') ? data.message.trim() : ''
	if (!message) {
		const fallback = fallbackMessages[code]
		message = fallback
			? fallback()
			: t('istota', 'The server answered with an error (HTTP {status}).', { status })
	}
	const fields = (data && typeof data.fields === 'object' && data.fields !== null) ? data.fields : {}
	const currentEtag = (data && typeof data.current_etag === 'string') ? data.current_etag : ''
	return new ApiError({ status, code, message, fields, currentEtag })
}

/**
 * request calls one route and resolves to the OCS `data`.
 *
 * @param {string} method HTTP method
 * @param {string} path route below api/v1
 * @param {object} [options] request options
 * @param {object} [options.params] query parameters
 * @param {any} [options.data] JSON body
 * @return {Promise<any>}
 */
export async function request(method, path, { params, data } = {}) {
	let response
	try {
		response = await axios.request({
			method,
			url: ocsUrl(path),
			params,
			data,
			headers: {
				'OCS-APIRequest': 'true',
				Accept: 'application/json',
			},
		})
	} catch (err) {
		throw toApiError(err)
	}
	const body = response.data
	if (!body || typeof body !== 'object' || !body.ocs) {
		// A 200 that is not OCS JSON is a login page or a proxy answering in our place.
		throw new ApiError({
			status: response.status,
			code: 'server_error',
			message: t('istota', 'The server sent an unexpected answer. Reload the page and try again.'),
		})
	}
	return body.ocs.data
}
