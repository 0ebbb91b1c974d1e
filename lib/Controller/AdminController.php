<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\AdminService;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * AdminController serves the admin section: sidecar health and the admin settings. It is
 * admin-only by Nextcloud's default: no action carries #[NoAdminRequired] (or any other
 * attribute that relaxes the check), so SecurityMiddleware refuses everyone else.
 */
class AdminController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly AdminService $admin,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	/** The sidecar's health, the app's version and whether they match. */
	#[ApiRoute(verb: 'GET', url: '/api/v1/admin/health')]
	public function health(): DataResponse {
		return $this->respond(fn (): array => $this->admin->health());
	}

	#[ApiRoute(verb: 'GET', url: '/api/v1/admin/settings')]
	public function settings(): DataResponse {
		return $this->respond(fn (): array => $this->admin->settings());
	}

	/** Changes the sections given; 422 invalid_settings with every bad field at once. */
	#[ApiRoute(verb: 'PUT', url: '/api/v1/admin/settings')]
	public function updateSettings(
		mixed $access = null,
		mixed $sandbox = null,
		mixed $network = null,
		mixed $brain = null,
		mixed $workers = null,
		mixed $limits = null,
		mixed $approvals = null,
	): DataResponse {
		$changes = ['access' => $access, 'sandbox' => $sandbox, 'network' => $network, 'brain' => $brain, 'workers' => $workers, 'limits' => $limits, 'approvals' => $approvals];
		return $this->respond(fn (): array => $this->admin->updateSettings($changes));
	}
}
