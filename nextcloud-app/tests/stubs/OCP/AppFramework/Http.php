<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework;

abstract class Http {
	public const STATUS_OK = 200;
	public const STATUS_CREATED = 201;
	public const STATUS_NO_CONTENT = 204;
	public const STATUS_BAD_REQUEST = 400;
	public const STATUS_UNAUTHORIZED = 401;
	public const STATUS_FORBIDDEN = 403;
	public const STATUS_NOT_FOUND = 404;
	public const STATUS_CONFLICT = 409;
	public const STATUS_REQUEST_ENTITY_TOO_LARGE = 413;
	public const STATUS_UNPROCESSABLE_ENTITY = 422;
	public const STATUS_INTERNAL_SERVER_ERROR = 500;
	public const STATUS_BAD_GATEWAY = 502;
	public const STATUS_SERVICE_UNAVAILABLE = 503;
}
