<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\AppFramework;

use OCP\IRequest;

/**
 * In Nextcloud the responders wrap a DataResponse in the OCS envelope; the tests assert
 * on the DataResponse itself, so they are left out here.
 */
abstract class OCSController extends ApiController {
	public const RESPOND_UNAUTHORISED = 997;
	public const RESPOND_SERVER_ERROR = 996;
	public const RESPOND_NOT_FOUND = 998;
	public const RESPOND_UNKNOWN_ERROR = 999;

	public function __construct($appName,
		IRequest $request,
		$corsMethods = 'PUT, POST, GET, DELETE, PATCH',
		$corsAllowedHeaders = 'Authorization, Content-Type, Accept, OCS-APIRequest',
		$corsMaxAge = 1728000) {
		parent::__construct($appName, $request, $corsMethods, $corsAllowedHeaders, $corsMaxAge);
	}
}
