<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Controller;

use OCA\Istota\Controller\OcsBaseController;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\BruteForceProtection;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\Attribute\NoCSRFRequired;
use OCP\AppFramework\Http\Attribute\PublicPage;
use OCP\AppFramework\OCSController;
use PHPUnit\Framework\TestCase;

/**
 * The routes and the access contract they rely on, read from the attributes exactly as
 * Nextcloud's router (lib/Controller/*Controller.php, methods with a Route attribute) and
 * SecurityMiddleware (NoAdminRequired, NoCSRFRequired, PublicPage, …) read them. The
 * middleware does not run here, so this test pins what it would be given:
 *
 * - every user route carries #[NoAdminRequired] and nothing else that relaxes security;
 * - every admin route carries nothing at all that relaxes security (admin-only default);
 * - no route is public or exempt from CSRF (they are OCS routes, and Nextcloud lets an
 *   OCSController request without a CSRF token through only with OCS-APIRequest: true),
 *   except the one the sidecar calls, which is signed and brute-force protected instead;
 * - no route or action parameter names a user: the user always comes from the session.
 */
class RoutesTest extends TestCase {
	private const API = '/api/v1/';

	/** Attributes that relax Nextcloud's default (logged-in admin, CSRF, 2FA). */
	private const RELAXING = [
		'OCP\AppFramework\Http\Attribute\NoAdminRequired',
		'OCP\AppFramework\Http\Attribute\PublicPage',
		'OCP\AppFramework\Http\Attribute\NoCSRFRequired',
		'OCP\AppFramework\Http\Attribute\SubAdminRequired',
		'OCP\AppFramework\Http\Attribute\NoTwoFactorRequired',
		'OCP\AppFramework\Http\Attribute\AuthorizedAdminSetting',
		'OCP\AppFramework\Http\Attribute\AnonRateLimit',
		'OCP\AppFramework\Http\Attribute\CORS',
	];

	/** docs/user-api.md, "App OCS API": verb and URL => who. */
	private const CONTRACT = [
		'GET me' => 'user',
		'GET me/status' => 'user',
		'GET me/tasks/{id}/events' => 'user',
		'POST me/stop' => 'user',
		'GET me/approvals' => 'user',
		'POST me/approvals/{id}' => 'user',
		'PUT me/approvals/policies' => 'user',
		'POST me/ws-token' => 'user',
		'GET me/memory/user' => 'user',
		'PUT me/memory/user' => 'user',
		'GET me/memory/audit' => 'user',
		'GET me/memory/channels' => 'user',
		'GET me/memory/dated' => 'user',
		'GET me/memory/facts' => 'user',
		'GET me/memory/search' => 'user',
		'POST me/memory/facts/{id}/invalidate' => 'user',
		'DELETE me/memory/facts/{id}' => 'user',
		'GET me/schedule' => 'user',
		'POST me/schedule/jobs/{name}/{action}' => 'user',
		'GET me/settings' => 'user',
		'PUT me/settings' => 'user',
		'GET me/mailbox' => 'user',
		'PUT me/mailbox' => 'user',
		'POST me/mailbox/test' => 'user',
		'DELETE me/mailbox' => 'user',
		'GET admin/health' => 'admin',
		'GET admin/settings' => 'admin',
		'PUT admin/settings' => 'admin',
		'POST sidecar/ready' => 'sidecar',
		'POST sidecar/posted' => 'sidecar',
		'POST sidecar/nextcloud/share' => 'sidecar',
		'POST sidecar/nextcloud/shares' => 'sidecar',
		'POST sidecar/nextcloud/mkdir' => 'sidecar',
		'POST sidecar/nextcloud/conversations' => 'sidecar',
		'POST sidecar/nextcloud/post-target' => 'sidecar',
	];

	/**
	 * Every route of the app as the router finds it.
	 *
	 * @return array<string, array{class: \ReflectionClass, method: \ReflectionMethod, route: ApiRoute}> "VERB url" => route
	 */
	private static function routes(): array {
		$routes = [];
		foreach (glob(ISTOTA_REPO_ROOT . '/lib/Controller/*Controller.php') as $file) {
			$class = new \ReflectionClass('OCA\Istota\Controller\\' . basename($file, '.php'));
			foreach ($class->getMethods() as $method) {
				foreach ($method->getAttributes('OCP\AppFramework\Http\Attribute\Route', \ReflectionAttribute::IS_INSTANCEOF) as $attribute) {
					$route = $attribute->newInstance();
					$key = $route->getVerb() . ' ' . $route->getUrl();
					self::assertArrayNotHasKey($key, $routes, 'route declared twice');
					$routes[$key] = ['class' => $class, 'method' => $method, 'route' => $route];
				}
			}
		}
		return $routes;
	}

	public function testTheRoutesAreExactlyTheContract(): void {
		$found = [];
		foreach (self::routes() as $key => $r) {
			[$verb, $url] = explode(' ', $key, 2);
			$this->assertInstanceOf(ApiRoute::class, $r['route'], $key . ' is an OCS route');
			$this->assertStringStartsWith(self::API, $url);
			$found[$verb . ' ' . substr($url, strlen(self::API))] = true;
		}
		$this->assertEqualsCanonicalizing(array_keys(self::CONTRACT), array_keys($found));
	}

	public function testUserRoutesNeedALoginButNoAdminAndRelaxNothingElse(): void {
		foreach (self::routes() as $key => $r) {
			$names = self::attributeNames($r['method']);
			$relaxing = array_values(array_intersect($names, self::RELAXING));
			$who = self::CONTRACT[self::contractKey($key)];
			if ($who === 'user') {
				$this->assertSame([NoAdminRequired::class], $relaxing, $key);
			} elseif ($who === 'sidecar') {
				$this->assertEqualsCanonicalizing([PublicPage::class, NoCSRFRequired::class], $relaxing, $key);
				$this->assertContains(BruteForceProtection::class, $names, $key . ' is brute-force protected');
			} else {
				$this->assertSame([], $relaxing, $key . ' must stay admin-only');
			}
		}
	}

	public function testNoControllerRelaxesSecurityForAllItsActions(): void {
		foreach (self::controllers() as $class) {
			$names = array_map(static fn (\ReflectionAttribute $a): string => $a->getName(), $class->getAttributes());
			$this->assertSame([], array_values(array_intersect($names, self::RELAXING)), $class->getName());
		}
	}

	public function testEveryControllerIsAnOcsControllerSoCsrfIsCheckedTheOcsWay(): void {
		foreach (self::controllers() as $class) {
			$this->assertTrue($class->isSubclassOf(OCSController::class), $class->getName());
			$this->assertTrue($class->isSubclassOf(OcsBaseController::class), $class->getName() . ' maps errors in one place');
		}
		foreach (self::routes() as $key => $r) {
			$this->assertSame($r['class']->getName(), $r['method']->getDeclaringClass()->getName(), $key . ' is declared where it is routed');
		}
	}

	public function testNoRouteOrActionTakesAUserFromTheRequest(): void {
		foreach (self::routes() as $key => $r) {
			$this->assertDoesNotMatchRegularExpression('/\{(uid|user|userId|user_id)\}/i', $key);
			foreach ($r['method']->getParameters() as $parameter) {
				$this->assertDoesNotMatchRegularExpression('/^(uid|user|userid|user_id|owner)$/i', $parameter->getName(), $key);
			}
		}
	}

	public function testPathParametersAreConstrained(): void {
		$routes = self::routes();
		$this->assertSame(['id' => '\d+'], $routes['GET /api/v1/me/tasks/{id}/events']['route']->getRequirements());
		$this->assertSame(['id' => '\d+'], $routes['DELETE /api/v1/me/memory/facts/{id}']['route']->getRequirements());
		$this->assertSame(['id' => '\d+'], $routes['POST /api/v1/me/memory/facts/{id}/invalidate']['route']->getRequirements());
		$this->assertSame(['action' => 'enable|disable|run'], $routes['POST /api/v1/me/schedule/jobs/{name}/{action}']['route']->getRequirements());
	}

	/** @return list<\ReflectionClass> the classes the router scans */
	private static function controllers(): array {
		$classes = [];
		foreach (glob(ISTOTA_REPO_ROOT . '/lib/Controller/*Controller.php') as $file) {
			$class = new \ReflectionClass('OCA\Istota\Controller\\' . basename($file, '.php'));
			if (!$class->isAbstract()) {
				$classes[] = $class;
			}
		}
		return $classes;
	}

	/** @return list<string> */
	private static function attributeNames(\ReflectionMethod $method): array {
		return array_map(static fn (\ReflectionAttribute $a): string => $a->getName(), $method->getAttributes());
	}

	private static function contractKey(string $routeKey): string {
		[$verb, $url] = explode(' ', $routeKey, 2);
		return $verb . ' ' . substr($url, strlen(self::API));
	}
}
